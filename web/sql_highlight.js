// SQL shown with its keywords, strings, numbers and comments marked (a small tokenizer; the
// text is only displayed, never run).

const KEYWORDS = new Set(`select from where group by order having limit as and or not in is null join left right full
inner outer on union all distinct case when then else end create table view insert into with set drop show
describe explain interval tumble hop session cumulate watermark for over partition rows range between
preceding following current row unnest true false like cast filter exists semi anti proctime descriptor
asc desc count sum min max avg lag if values`.split(/\s+/));

const TOKEN = /(--[^\n]*|\/\*[\s\S]*?\*\/)|('(?:[^']|'')*'?)|("(?:[^"]|"")*"?|`[^`]*`?)|(\b\d+(?:\.\d+)?\b)|([A-Za-z_][A-Za-z0-9_]*)/g;

/** `sql` as nodes: text and <span class="sql-…"> for each token kind. */
export function highlight(sql) {
  const nodes = [];
  let at = 0;
  for (const match of sql.matchAll(TOKEN)) {
    if (match.index > at) nodes.push(document.createTextNode(sql.slice(at, match.index)));
    let kind = null;
    if (match[1]) kind = 'comment';
    else if (match[2]) kind = 'string';
    else if (match[3]) kind = 'identifier';
    else if (match[4]) kind = 'number';
    else if (KEYWORDS.has(match[5].toLowerCase())) kind = 'keyword';
    if (kind) {
      const span = document.createElement('span');
      span.className = `sql-${kind}`;
      span.textContent = match[0];
      nodes.push(span);
    } else {
      nodes.push(document.createTextNode(match[0]));
    }
    at = match.index + match[0].length;
  }
  if (at < sql.length) nodes.push(document.createTextNode(sql.slice(at)));
  return nodes;
}
