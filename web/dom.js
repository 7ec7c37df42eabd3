// Building DOM without innerHTML (nothing the server sends is ever parsed as markup), and
// replacing a region's contents without losing keyboard focus.

const SVG = 'http://www.w3.org/2000/svg';

/** An HTML element: attributes (`on*` are listeners, `class`, `for`, `aria-*`...), children. */
export function h(tag, attributes = {}, ...children) {
  return build(document.createElement(tag), attributes, children);
}

/** An SVG element, the same way. */
export function s(tag, attributes = {}, ...children) {
  return build(document.createElementNS(SVG, tag), attributes, children);
}

function build(element, attributes, children) {
  for (const [name, value] of Object.entries(attributes || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith('on') && typeof value === 'function') {
      element.addEventListener(name.slice(2), value);
    } else if (value === true) {
      element.setAttribute(name, '');
    } else {
      element.setAttribute(name, String(value));
    }
  }
  append(element, children);
  return element;
}

function append(element, children) {
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue;
    if (Array.isArray(child)) append(element, child);
    else if (child instanceof Node) element.appendChild(child);
    else element.appendChild(document.createTextNode(String(child)));
  }
}

/**
 * Replaces the children of `container`, keeping focus on the element with the same id (the
 * views re-render every second; a keyboard user must not lose their place).
 */
export function replace(container, ...children) {
  const focused = document.activeElement;
  const id = focused && container.contains(focused) ? focused.id : '';
  container.replaceChildren();
  append(container, children);
  if (id) document.getElementById(id)?.focus({ preventScroll: true });
}

/** A table: `columns` are [label, class?]; `rows` are arrays of cells (text or nodes). */
export function table(columns, rows, attributes = {}) {
  return h('table', attributes,
    h('thead', {}, h('tr', {}, columns.map(([label, cls]) => h('th', { scope: 'col', class: cls }, label)))),
    h('tbody', {}, rows.map((row) => (row instanceof Node ? row
      : h('tr', {}, row.map((cell, i) => h('td', { class: columns[i]?.[1] }, cell)))))));
}
