// The side panel's tabs (WAI-ARIA tabs: arrow keys move between them, the chosen one shows its panel).

export class Tabs {
  /** onShow(tabId) after a tab is shown. */
  constructor(list, { onShow = () => {} } = {}) {
    this.onShow = onShow;
    this.tabs = [...list.querySelectorAll("[role=tab]")];
    list.addEventListener("click", (event) => {
      const tab = event.target.closest("[role=tab]");
      if (tab) this.show(tab.id);
    });
    list.addEventListener("keydown", (event) => {
      const at = this.tabs.indexOf(document.activeElement);
      const step = { ArrowRight: 1, ArrowLeft: -1 }[event.key];
      if (at < 0 || !step) return;
      const next = this.tabs[(at + step + this.tabs.length) % this.tabs.length];
      this.show(next.id);
      next.focus();
    });
  }

  show(id) {
    for (const tab of this.tabs) {
      const chosen = tab.id === id;
      tab.setAttribute("aria-selected", String(chosen));
      tab.tabIndex = chosen ? 0 : -1;
      document.getElementById(tab.getAttribute("aria-controls")).hidden = !chosen;
    }
    this.onShow(id);
  }

  shown() {
    return this.tabs.find((tab) => tab.getAttribute("aria-selected") === "true")?.id ?? null;
  }
}
