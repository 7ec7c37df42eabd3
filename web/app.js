// The page's router: `#/` the pipelines list, `#/pipelines/ID[/TAB]` one pipeline, `#/editor`
// the SQL editor. Each view is mounted into <main> and unmounted (its timers and streams
// stopped) when the hash changes.

import * as api from './api.js';
import { mountEditor } from './editor.js';
import { mountList } from './list.js';
import { mountPipeline } from './pipeline.js';

const main = document.getElementById('main');
let unmount = () => {};

function route() {
  unmount();
  const hash = location.hash.replace(/^#/, '') || '/';
  const pipeline = hash.match(/^\/pipelines\/(\d+)(?:\/([a-z-]+))?$/);
  let view = 'pipelines';
  if (pipeline) {
    unmount = mountPipeline(main, Number(pipeline[1]), pipeline[2] || 'overview');
  } else if (hash === '/editor') {
    view = 'editor';
    unmount = mountEditor(main);
  } else {
    unmount = mountList(main);
  }
  for (const link of document.querySelectorAll('[data-nav]')) {
    if (link.dataset.nav === view) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
  }
}

function showTokenButton() {
  document.getElementById('forget-token').hidden = api.token() === null;
}

document.getElementById('forget-token').addEventListener('click', () => {
  api.forgetToken();
  showTokenButton();
  route();
});
document.addEventListener('weir-token', showTokenButton);
window.addEventListener('hashchange', route);
showTokenButton();
route();
