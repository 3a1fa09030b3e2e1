// Building the page from data without innerHTML: every text from the API goes in as a text node.

/** h("li", {class: "x", dataset: {id}}, "text", child) -> HTMLElement. null/false children are skipped. */
export function h(tag, attrs = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "dataset") Object.assign(element.dataset, value);
    else if (name === "class") element.className = value;
    else if (name.startsWith("on")) element.addEventListener(name.slice(2), value);
    else element.setAttribute(name, value === true ? "" : String(value));
  }
  element.append(...children.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false && c !== ""));
  return element;
}

export function clear(element) {
  element.replaceChildren();
  return element;
}

/** Replaces an element's content; like h(), null/false children (and nested arrays of them) are skipped. */
export function fill(element, ...children) {
  element.replaceChildren(...children.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false));
  return element;
}
