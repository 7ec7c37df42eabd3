// The errors-and-transitions tab: status changes and errors in one timeline, newest first.

import { h } from './dom.js';
import * as format from './format.js';
import { statusBadge } from './list.js';

export function timeline(view) {
  const entries = [
    ...view.transitions.map((t) => ({ at: t.at_ms, status: t.status, message: t.detail || '' })),
    ...view.errors.map((e) => ({ at: e.at_ms, status: 'error', message: e.message })),
  ].sort((a, b) => b.at - a.at);
  if (entries.length === 0) return h('p', { class: 'empty' }, 'Nothing has happened yet.');
  return h('ol', { class: 'timeline', 'aria-label': 'Errors and status changes, newest first' },
    entries.map((e) => h('li', { class: e.status === 'error' ? 'timeline-error' : '' },
      h('time', { datetime: new Date(e.at).toISOString() }, format.clock(e.at)),
      statusBadge(e.status),
      h('span', { class: 'message' }, e.message))));
}
