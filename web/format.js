// How numbers, times and sizes read on the page.

export function duration(ms) {
  if (ms === null || ms === undefined) return '';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const seconds = ms / 1000;
  if (seconds < 60) return `${seconds.toFixed(seconds < 10 ? 1 : 0)} s`;
  const minutes = Math.floor(seconds / 60);
  if (minutes < 60) return `${minutes} min ${Math.floor(seconds % 60)} s`;
  const hours = Math.floor(minutes / 60);
  if (hours < 48) return `${hours} h ${minutes % 60} min`;
  return `${Math.floor(hours / 24)} d ${hours % 24} h`;
}

export function ago(atMs) {
  if (!atMs) return '';
  return `${duration(Math.max(0, Date.now() - atMs))} ago`;
}

export function bytes(n) {
  if (n === null || n === undefined) return '';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = n;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return unit === 0 ? `${value} B` : `${value.toFixed(value < 10 ? 1 : 0)} ${units[unit]}`;
}

export function rate(perSecond) {
  if (perSecond === null || perSecond === undefined) return '';
  if (perSecond >= 1e6) return `${(perSecond / 1e6).toFixed(1)}M/s`;
  if (perSecond >= 1e4) return `${(perSecond / 1e3).toFixed(0)}k/s`;
  return `${Math.round(perSecond)}/s`;
}

export function count(n) {
  return n === null || n === undefined ? '' : Number(n).toLocaleString('en-US');
}

export function clock(atMs) {
  if (!atMs) return '';
  const d = new Date(atMs);
  const pad = (v, w = 2) => String(v).padStart(w, '0');
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

export function percent(ratio) {
  return `${Math.round((ratio || 0) * 100)}%`;
}

/** A checkpoint's kind as the engine reports it, in words. */
export function checkpointKind(kind) {
  if (typeof kind === 'string') return kind.replaceAll('_', ' ');
  if (kind && kind.aligned_timeout) {
    return kind.aligned_timeout.timed_out ? 'aligned, timed out into unaligned' : 'aligned (with timeout)';
  }
  return String(kind);
}

/** The CSS class of a checkpoint's kind (for the chart's colours). */
export function checkpointKindClass(kind) {
  if (typeof kind === 'string') return `kind-${kind}`;
  if (kind && kind.aligned_timeout) return kind.aligned_timeout.timed_out ? 'kind-timed_out' : 'kind-aligned';
  return 'kind-aligned';
}
