// The page's helpers: finding and building elements, and the header's
// error bar and stream state, shared by every section.
//
// Every string that comes from the server is put into the page as text
// (textContent, text nodes, attributes), never as HTML.

export const $ = (id) => document.getElementById(id);
export const enc = encodeURIComponent;

/** An element; `attrs` are set as attributes (`class`, `text` are special). */
export function el(tag, attrs, ...children) {
  return fill(document.createElement(tag), attrs, children);
}

/** An SVG element, built as `el` builds an HTML one. */
export function svgEl(tag, attrs, ...children) {
  return fill(document.createElementNS(SVG_NS, tag), attrs, children);
}

const SVG_NS = 'http://www.w3.org/2000/svg';

function fill(node, attrs, children) {
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'class') node.setAttribute('class', value);
    else if (key === 'text') node.textContent = String(value);
    else node.setAttribute(key, String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

export function setText(node, value) {
  const text = value === undefined || value === null ? '' : String(value);
  if (node.textContent !== text) node.textContent = text;
}

// Errors by source, shown together in the bar under the header.
const errors = new Map();
export function setError(source, message) {
  if (message) errors.set(source, message);
  else errors.delete(source);
  const bar = $('error-bar');
  setText(bar, [...errors.values()].join(' · '));
  bar.hidden = errors.size === 0;
}

export function setStreamState(state, text) {
  const node = $('stream-state');
  node.dataset.state = state;
  setText(node, text === undefined ? state : text);
}
