// The lifecycle buttons (stop with a savepoint, stop now, resume, delete), shared by the list
// and the pipeline view: each asks first and shows what the server answered.

import * as api from './api.js';
import { h } from './dom.js';

const ACTIONS = [
  {
    name: 'stop', label: 'Stop', when: ['running', 'recovering', 'failing'],
    question: (id) => `Stop pipeline ${id} with a savepoint? It can be resumed from it later.`,
    run: (id) => api.post(`/pipelines/${id}/stop`),
    done: (id) => `Pipeline ${id} is stopping with a savepoint.`,
  },
  {
    name: 'stop-now', label: 'Stop now', when: ['running', 'recovering', 'failing', 'stopping'],
    question: (id) => `Stop pipeline ${id} at once, without a savepoint? It resumes from its last checkpoint.`,
    run: (id) => api.post(`/pipelines/${id}/stop-now`),
    done: (id) => `Pipeline ${id} stopped at once, without a savepoint.`,
  },
  {
    name: 'resume', label: 'Resume', when: ['stopped', 'failed', 'finished'],
    question: (id) => `Resume pipeline ${id} from its latest checkpoint?`,
    run: (id) => api.post(`/pipelines/${id}/resume`, {}),
    done: (id) => `Pipeline ${id} is running again.`,
  },
  {
    name: 'delete', label: 'Delete', when: null, danger: true,
    question: (id) => `Delete pipeline ${id} with all its checkpoints? This cannot be undone.`,
    run: (id) => api.del(`/pipelines/${id}`),
    done: (id) => `Deleted pipeline ${id}.`,
  },
];

/** Shows `text` in the toast region (read out by screen readers). */
export function toast(text, isError = false) {
  const region = document.getElementById('toast');
  region.textContent = text;
  region.classList.toggle('error', isError);
  region.classList.add('shown');
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => region.classList.remove('shown'), isError ? 10000 : 5000);
}

/** Asks `question` in the confirm dialog; resolves to whether it was confirmed. */
export function confirm(title, question) {
  const dialog = document.getElementById('confirm-dialog');
  document.getElementById('confirm-title').textContent = title;
  document.getElementById('confirm-message').textContent = question;
  return new Promise((resolve) => {
    dialog.addEventListener('close', () => resolve(dialog.returnValue === 'ok'), { once: true });
    dialog.returnValue = '';
    dialog.showModal();
    document.getElementById('confirm-ok').focus();
  });
}

/** The action buttons for pipeline `id` in `status`; `after` runs once an action is done. */
export function actionButtons(id, status, after, idPrefix) {
  return h('div', { class: 'actions' }, ACTIONS.map((action) => h('button', {
    type: 'button',
    id: `${idPrefix}-${action.name}-${id}`,
    class: action.danger ? 'danger' : '',
    'data-action': action.name,
    disabled: action.when !== null && !action.when.includes(status),
    'aria-label': `${action.label} pipeline ${id}`,
    onclick: async () => {
      if (!(await confirm(`${action.label} pipeline ${id}`, action.question(id)))) return;
      try {
        await action.run(id);
        toast(action.done(id));
      } catch (error) {
        toast(`Pipeline ${id}: ${error.message}`, true);
      }
      after(action.name);
    },
  }, action.label)));
}
