// The HTML of the status page (GET /) from the read model of status-data.ts. Everyone who can
// read sees the same page; only an operator gets the pause and resume forms, which post to
// status-routes.ts (the same verbs as `genfill pause|resume`, behind the same-origin check).
import { OPEN_STATES } from '@genfill/contracts';
import { queueName } from '@genfill/queue';
import { formatDuration, pausedBy, type ThrottleDecisionSummary } from '@genfill/registry';
import { ago, esc, instant, num, seg } from './html.ts';
import { evidencePath, renderHeatmap } from './heatmap.ts';
import type { DatasetOverview, ReleaseDetail, ReleaseOverview, StatusData } from './status-data.ts';

export const REFRESH_SECONDS = 15;

export const anchorOf = (release: string): string => `release-${release.replace(/[^A-Za-z0-9_-]/g, '_')}`;
export const findingsPath = (reconciliation: string): string => `/status/reconciliations/${seg(reconciliation)}/findings`;
const actionPath = (release: string, verb: 'pause' | 'resume') => `/status/releases/${seg(release)}/${verb}`;

function progress(r: ReleaseOverview): string {
  const { total, built, running, failed } = r.counts;
  if (total === 0) return '<span class="muted">not planned</span>';
  const pct = ((100 * built) / total).toFixed(1);
  return (
    `${num(built)} / ${num(total)} built (${pct}%)` +
    (running ? `, ${num(running)} running` : '') +
    (failed ? `, <span class="bad">${num(failed)} failed</span>` : '')
  );
}

function rate(r: ReleaseOverview): { rows: string; eta: string } {
  if (r.state !== 'BUILDING') return { rows: '—', eta: '—' };
  const rows = r.rates.rowsPerSecond === null ? '—' : num(Math.round(r.rates.rowsPerSecond));
  return { rows, eta: formatDuration(r.rates.etaSeconds) };
}

function pauseFlags(r: ReleaseOverview, now: number): string {
  const flags = pausedBy(r.paused).map((flag) => `<span class="paused">${flag}</span>`);
  const last = r.lastPause;
  const by = last
    ? `<br><span class="muted" title="${esc(instant(last.at))}">${esc(last.action === 'pause' ? 'paused' : 'resumed')} by ${esc(last.principal)}` +
      `${last.via ? ` via ${esc(last.via)}` : ''} ${esc(ago(last.at, now))}${last.reason ? `: ${esc(last.reason)}` : ''}</span>`
    : '';
  return (flags.length ? `paused (${flags.join(', ')})` : 'not paused') + by;
}

function throttleCell(t: ThrottleDecisionSummary | null | undefined, now: number): string {
  if (!t) return '<span class="muted">no decision yet</span>';
  const ratio = t.ratio === null ? '' : ` at ${t.ratio.toFixed(2)}× budget`;
  return `${esc(t.action)}; binding: <strong>${esc(t.binding)}</strong>${esc(ratio)}<br><span class="muted" title="${esc(t.at)}">${esc(ago(t.at, now))}</span>`;
}

function releaseTable(data: StatusData, now: number): string {
  if (data.releases.length === 0) return '<p class="muted">No releases yet: <code>genfill release submit &lt;file&gt;</code>, then <code>genfill plan &lt;release&gt;</code>.</p>';
  const details = new Map(data.details.map((d) => [d.release.id, d]));
  const rows = data.releases.map((r) => {
    const d = details.get(r.id);
    const { rows: rps, eta } = rate(r);
    const name = d ? `<a href="#${anchorOf(r.id)}">${esc(r.id)}</a>` : esc(r.id);
    return (
      `<tr data-release="${esc(r.id)}"><td>${name}</td><td>${esc(r.dataset)} → ${esc(r.generation)}</td><td class="state">${esc(r.state)}</td>` +
      `<td>${progress(r)}</td><td class="n">${rps}</td><td class="n">${eta}</td><td>${pauseFlags(r, now)}</td>` +
      `<td>${d ? throttleCell(d.throttle, now) : '<span class="muted">—</span>'}</td></tr>`
    );
  });
  return `<table><thead><tr><th>Release</th><th>Dataset → generation</th><th>State</th><th>Progress</th><th>rows/s</th><th>ETA</th><th>Pause</th><th>Throttle</th></tr></thead><tbody>${rows.join('')}</tbody></table>`;
}

// --- The drift check's last verdict per dataset (issue 29): the count, the keys it names (a
// bounded sample: keys, no row image, as the findings), when, and whether it is the active generation's.
function driftCell(d: DatasetOverview, now: number): string {
  const v = d.drift;
  if (!v) return '<span class="muted">not checked yet</span>';
  const when = `<span class="muted" title="${esc(v.finishedAt)}">${esc(ago(new Date(v.finishedAt), now))}, ${esc(v.generation)}${v.current ? '' : ' (not the active generation)'}</span>`;
  if (v.driftedRows === 0) return `<span class="ok">no drift</span> in ${num(v.rowsChecked)} rows; ${when}`;
  const keys = v.keySample.map((k) => `<code>${esc(JSON.stringify(k))}</code>`).join(' ');
  const more = v.driftedKeys > v.keySample.length ? ` … and ${num(v.driftedKeys - v.keySample.length)} more` : '';
  return `<span class="bad">DRIFTED: ${num(v.driftedRows)} rows</span> (${num(v.driftedKeys)} keys: ${keys}${more}); ${when}`;
}

function datasetTable(list: DatasetOverview[], now: number): string {
  if (list.length === 0) return '<p class="muted">No datasets yet.</p>';
  const rows = list.map((d) => {
    const lag = d.lag?.frontierAt
      ? `${d.lag.stoppedAt ? `<strong>STOPPED at key ${esc(JSON.stringify(d.lag.stoppedAt))}</strong>; ` : ''}` +
        `${num(d.lag.pendingEvents)} events pending, oldest ${d.lag.lagSeconds.toFixed(1)} s; ` +
        `frontier committed ${esc(ago(d.lag.frontierAt, now))} <span class="muted">(${esc(instant(d.lag.frontierAt))})</span>`
      : '<span class="muted">no projector yet</span>';
    const rw = d.sourceRewrite
      ? `<br><strong>SOURCE REWRITTEN</strong> ${esc(instant(d.sourceRewrite.at))}: ${esc(d.sourceRewrite.command)} on <code>${esc(d.sourceRewrite.table)}</code> ` +
        `(${esc(d.sourceRewrite.reasons.join(', '))}); cutovers wait for <code>genfill reconcile --dataset ${esc(d.name)}</code>` +
        (d.sourceRewrite.driftCheck ? `, which found ${num(d.sourceRewrite.driftCheck.missing + d.sourceRewrite.driftCheck.extra)} differing rows` : '')
      : '';
    return (
      `<tr data-dataset="${esc(d.name)}"><td>${esc(d.name)}</td><td><code>${esc(d.targetTable)}</code></td><td>${esc(d.activeGeneration ?? '—')}</td>` +
      `<td>${esc(d.ingress.state)} (epoch ${num(d.ingress.epoch)})</td><td class="lag">${lag}${rw}</td><td class="drift">${driftCell(d, now)}</td></tr>`
    );
  });
  return `<table><thead><tr><th>Dataset</th><th>Target</th><th>Active generation</th><th>Ingress</th><th>Projector lag</th><th>Drift check</th></tr></thead><tbody>${rows.join('')}</tbody></table>`;
}

function actions(r: ReleaseOverview, canOperate: boolean): string {
  const links = `<a href="/admin/queues/queue/${seg(queueName(r.id))}">Bull Board queue</a> · <a href="/releases/${seg(r.id)}">JSON</a>`;
  if (!canOperate || !OPEN_STATES.includes(r.state)) return `<p>${links}</p>`;
  const form = r.paused.operator
    ? `<form class="act" method="post" action="${esc(actionPath(r.id, 'resume'))}"><input type="text" name="reason" placeholder="why resume (required)" required maxlength="1000" aria-label="reason to resume">` +
      '<button type="submit">Resume</button></form>'
    : `<form class="act" method="post" action="${esc(actionPath(r.id, 'pause'))}"><input type="text" name="reason" placeholder="reason (optional)" maxlength="1000" aria-label="reason to pause">` +
      '<button type="submit">Pause</button></form>';
  return `<div>${form}</div><p>${links}</p>`;
}

function throttleDetail(t: ThrottleDecisionSummary | null, now: number): string {
  if (!t) return '<p class="muted">No throttle decision yet: the controller decides once workers serve this release.</p>';
  const signals = Object.entries(t.signals)
    .map(([k, v]) => `${esc(k)} ${v === null ? '—' : esc(Number(v.toFixed(3)))}`)
    .join(', ');
  return (
    `<p>Latest decision ${esc(ago(t.at, now))}: <strong>${esc(t.action)}</strong>, binding signal <strong>${esc(t.binding)}</strong>` +
    `${t.ratio === null ? '' : ` (${esc(t.ratio.toFixed(2))}× its budget)`}; concurrency ${num(t.concurrency)}, ${num(Math.round(t.rowsPerSecond))} rows/s admitted ` +
    `across ${num(t.liveWorkers)} worker(s)${t.throttlePaused ? ', <span class="paused">throttle paused</span>' : ''}. <span class="muted">Signals: ${signals || 'none'}.</span></p>`
  );
}

function reconciliationDetail(d: ReleaseDetail, now: number): string {
  const c = d.reconciliation;
  if (!c) return '<p class="muted">Not reconciled yet (<code>genfill reconcile</code>).</p>';
  const verdict = c.state === 'RECONCILED' ? '<span class="ok">RECONCILED</span>' : `<span class="bad">${esc(c.state)}</span>`;
  const rows = c.rows?.source !== undefined ? `; rows: ${esc(num(Number(c.rows.source)))} source, ${esc(num(Number(c.rows.stored ?? 0)))} stored` : '';
  const findings = c.findings > 0 ? `<a class="findings" href="${esc(findingsPath(c.id))}">${num(c.findings)} finding(s) (NDJSON)</a>` : 'no findings';
  return `<p>Reconciliation #${esc(c.id)}: ${verdict}, ${findings}${rows}; by ${esc(c.principal)} ${esc(ago(c.at, now))}.</p>`;
}

function listedPartitions(d: ReleaseDetail, now: number): string {
  if (d.listed.length === 0) return '';
  const rows = d.listed.map((p) => {
    const id = p.status === 'FAILED' ? `<a href="${esc(evidencePath(d.release.id, p.id))}">${esc(p.id)}</a>` : esc(p.id);
    const what = p.status === 'FAILED' ? `<span class="bad">FAILED</span> ${esc(p.reason ?? '')}` : `RUNNING on ${esc(p.leasedBy ?? '?')}`;
    return `<tr><td>${id}</td><td>${what}</td><td class="n">${num(p.attempt)}</td><td>${esc(ago(p.updatedAt, now))}</td></tr>`;
  });
  const { failed, running } = d.release.counts;
  const more = failed + running > d.listed.length ? `<p class="muted">Showing ${d.listed.length} of ${num(failed + running)}: <code>genfill status ${esc(d.release.id)} --partitions FAILED</code> lists all.</p>` : '';
  return `<h3>Failed and running partitions</h3><table><thead><tr><th>Partition</th><th>Status</th><th>Attempt</th><th>Updated</th></tr></thead><tbody>${rows.join('')}</tbody></table>${more}`;
}

function releaseSection(d: ReleaseDetail, canOperate: boolean, now: number): string {
  const r = d.release;
  return (
    `<section class="release" id="${anchorOf(r.id)}" data-release="${esc(r.id)}"><h2>${esc(r.id)} <span class="state">${esc(r.state)}</span></h2>` +
    `<p>${progress(r)} · ${esc(r.dataset)} → ${esc(r.generation)} · ${esc(instant(r.from))} to ${esc(instant(r.to))} every ${esc(r.every)} · ${pauseFlags(r, now)}</p>` +
    actions(r, canOperate) +
    `<h3>Throttle</h3>${throttleDetail(d.throttle, now)}` +
    `<h3>Reconciliation</h3>${reconciliationDetail(d, now)}` +
    `<h3>Partitions</h3>${renderHeatmap(d.heatmap, r.id, r.timezone)}` +
    listedPartitions(d, now) +
    '</section>'
  );
}

export function statusPageBody(data: StatusData, canOperate: boolean): string {
  const now = data.at.getTime();
  return (
    `<p class="muted">As of ${esc(instant(data.at))}; refreshes every ${REFRESH_SECONDS} s.</p>` +
    `<h2>Releases</h2>${releaseTable(data, now)}` +
    `<h2>Datasets</h2>${datasetTable(data.datasets, now)}` +
    data.details.map((d) => releaseSection(d, canOperate, now)).join('')
  );
}
