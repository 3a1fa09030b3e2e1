// A keyboard-navigable list (WAI-ARIA listbox with aria-activedescendant): arrows, Home/End, Enter, and the mouse.

export class Listbox {
  /** onSelect(value, {open}) is called when an item is chosen: open is true for Enter and clicks. */
  constructor(element, { onSelect, onActive = () => {} }) {
    this.element = element;
    this.onSelect = onSelect;
    this.onActive = onActive;
    this.active = -1;
    element.addEventListener("keydown", (event) => this.key(event));
    element.addEventListener("click", (event) => {
      const item = event.target.closest("[role=option]");
      if (item) this.choose(this.items().indexOf(item), true);
    });
  }

  items() {
    return [...this.element.querySelectorAll("[role=option]")];
  }

  key(event) {
    const items = this.items();
    if (!items.length) return;
    const moves = { ArrowDown: this.active + 1, ArrowUp: this.active - 1, Home: 0, End: items.length - 1,
      PageDown: this.active + 10, PageUp: this.active - 10 };
    if (event.key in moves) {
      event.preventDefault();
      this.choose(Math.max(0, Math.min(items.length - 1, moves[event.key])), false);
    } else if (event.key === "Enter" || event.key === " ") {
      event.preventDefault();
      if (this.active >= 0) this.choose(this.active, true);
    }
  }

  choose(index, open) {
    const items = this.items();
    if (index < 0 || index >= items.length) return;
    this.highlight(index);
    this.onSelect(items[index].dataset.value, { open });
  }

  /** Marks an item active (and selected) without choosing it, e.g. when the graph selected it; scrolled into view
   * unless `scroll` is false (a list read again must not move under the reader). */
  highlight(index, { scroll = true } = {}) {
    const items = this.items();
    items.forEach((item, i) => {
      item.classList.toggle("active", i === index);
      item.setAttribute("aria-selected", String(i === index));
    });
    this.active = index;
    if (index >= 0) {
      this.element.setAttribute("aria-activedescendant", items[index].id);
      if (scroll) items[index].scrollIntoView({ block: "nearest" });
      this.onActive(items[index].dataset.value);
    }
  }

  highlightValue(value, options = {}) {
    this.highlight(this.items().findIndex((item) => item.dataset.value === value), options);
  }
}
