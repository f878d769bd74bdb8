// The status page's HTML shell and the escaping every value goes through. Pages are built as
// strings on the server (no front-end build): every value that came from the registry or the
// request is passed through esc(), and the Content-Security-Policy allows no script but the
// one inline refresh script carrying this response's nonce.
import { randomBytes } from 'node:crypto';
import type { Response } from 'express';
import { formatDuration } from '@genfill/registry';

const ENTITIES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

/** Text or attribute value → HTML; null and undefined become the empty string. */
export function esc(value: unknown): string {
  return value === null || value === undefined ? '' : String(value).replace(/[&<>"']/g, (c) => ENTITIES[c]!);
}

export const num = (n: number): string => n.toLocaleString('en-US');

/** "4m05s ago" for an instant in the past; "—" for none. */
export function ago(at: Date | string | null, now = Date.now()): string {
  if (at === null) return '—';
  const seconds = Math.max(0, (now - new Date(at).getTime()) / 1000);
  return `${formatDuration(seconds)} ago`;
}

/** An ISO instant without milliseconds, for a title attribute or a table cell. */
export function instant(at: Date | string | null): string {
  return at === null ? '—' : new Date(at).toISOString().replace(/\.\d{3}Z$/, 'Z');
}

/** A path segment: ids may hold '@' and '+'. */
export const seg = (s: string): string => encodeURIComponent(s);

const STYLE = `
body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#1b1f23;background:#fafbfc}
header{display:flex;gap:1.5rem;align-items:baseline;padding:.75rem 1.5rem;background:#24292e;color:#fff}
header h1{font-size:1.2rem;margin:0}header a{color:#c8e1ff}header .who{margin-left:auto}
main{padding:0 1.5rem 2rem;max-width:1100px}
h2{font-size:1.1rem;margin:1.5rem 0 .5rem}h3{font-size:1rem;margin:1rem 0 .25rem}
table{border-collapse:collapse;background:#fff;margin:.25rem 0 1rem}
th,td{border:1px solid #d1d5da;padding:.25rem .5rem;text-align:left;vertical-align:top}
th{background:#f1f3f5;font-weight:600}td.n{text-align:right;font-variant-numeric:tabular-nums}
section.release{background:#fff;border:1px solid #d1d5da;border-radius:6px;padding:.25rem 1rem 1rem;margin:1rem 0}
.state{font-weight:600}.paused{color:#b35900;font-weight:600}.bad{color:#b00020;font-weight:600}.ok{color:#22863a;font-weight:600}
.muted{color:#6a737d}form.act{display:inline-flex;gap:.25rem;margin:.25rem .5rem .25rem 0}
form.act input[type=text]{width:16rem;padding:.2rem}form.act button{padding:.2rem .75rem}
svg.heatmap{display:block;margin:.25rem 0}svg.heatmap text{font:10px system-ui,sans-serif;fill:#6a737d}
.legend span{display:inline-block;width:.8rem;height:.8rem;margin:0 .25rem 0 .75rem;vertical-align:middle}
pre{background:#f6f8fa;border:1px solid #d1d5da;padding:.5rem;overflow:auto;max-height:30rem}
`;

export interface PageOptions {
  title: string;
  /** Who is looking, for the header; null on a page shown before login. */
  who: { subject: string; role: string } | null;
  body: string;
  /** Extra CSS for this page. */
  style?: string;
  /** Reload the page every this many seconds (while no form field is being filled in). */
  refreshSeconds?: number;
}

/** Send a whole page with the headers every status page carries. */
export function sendPage(res: Response, status: number, o: PageOptions): void {
  const nonce = randomBytes(16).toString('base64');
  const refresh = o.refreshSeconds
    ? // A plain meta refresh would throw away a reason being typed; the script waits for it.
      `<noscript><meta http-equiv="refresh" content="${o.refreshSeconds}"></noscript>
<script nonce="${nonce}">setInterval(function(){var busy=[].some.call(document.querySelectorAll('input[type=text]'),function(i){return i.value!==''||i===document.activeElement});if(!busy)location.reload()},${o.refreshSeconds * 1000});</script>`
    : '';
  res
    .status(status)
    .type('html')
    .set('Cache-Control', 'no-store')
    .set(
      'Content-Security-Policy',
      `default-src 'none'; style-src 'unsafe-inline'; script-src 'nonce-${nonce}'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'`,
    )
    .set('X-Content-Type-Options', 'nosniff')
    .send(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>${esc(o.title)}</title>
<style>${STYLE}${o.style ?? ''}</style>
${refresh}
</head><body>
<header><h1><a href="/">genfill</a></h1><a href="/admin/queues">Bull Board</a><a href="/metrics">/metrics</a>
${o.who ? `<span class="who">${esc(o.who.subject)} (${esc(o.who.role)}) · <a href="/logout">Log out</a></span>` : ''}</header>
<main>
${o.body}
</main>
</body></html>
`);
}
