// One partition's evidence, where a failed heatmap cell links: its status, attempt and lease,
// the reason and evidence the worker recorded when it failed it (builder's failPartition), its
// receipts (a repair's superseding ones included) and the release_log rows that name it.
import { NotFoundError } from '@genfill/contracts';
import type { Db } from '@genfill/registry';
import { anchorOf } from './status-page.ts';
import { esc, instant, num } from './html.ts';

interface PartitionRow {
  release: string;
  id: string;
  seq: number;
  kind: string;
  lower: Date;
  upper: Date;
  status: string;
  attempt: number;
  leased_by: string | null;
  lease_expires_at: Date | null;
  est_rows: string | null;
  reason: string | null;
  evidence: unknown;
  updated_at: Date;
}

interface ReceiptRow {
  id: string;
  kind: string;
  attempt: number;
  rows_in: string;
  rows_out: string;
  watermark: string;
  supersedes: string | null;
  principal: string;
  created_at: Date;
}

interface LogRow {
  action: string;
  principal: string;
  at: Date;
  reason: string | null;
  detail: unknown;
}

async function partitionRow(db: Db, release: string, partition: string): Promise<PartitionRow | undefined> {
  const { rows } = await db.query<PartitionRow>(
    `SELECT release, id, seq, kind, lower, upper, status, attempt, leased_by, lease_expires_at, est_rows::text, reason, evidence, updated_at
       FROM genfill.partitions WHERE release = $1 AND id = $2`,
    [release, partition],
  );
  return rows[0];
}

async function partitionReceipts(db: Db, release: string, partition: string): Promise<ReceiptRow[]> {
  const { rows } = await db.query<ReceiptRow>(
    `SELECT id::text, kind, attempt, rows_in::text, rows_out::text, watermark::text, supersedes::text, principal, created_at
       FROM genfill.receipts r WHERE release = $1 AND partition = $2 ORDER BY r.id`,
    [release, partition],
  );
  return rows;
}

/** Log rows naming the partition: one partition (partition-failed) or a list (requeue, repair). */
async function partitionLog(db: Db, release: string, partition: string): Promise<LogRow[]> {
  const { rows } = await db.query<LogRow>(
    `SELECT action, principal, at, reason, detail FROM genfill.release_log
      WHERE release = $1 AND (detail->>'partition' = $2 OR detail->'partitions' ? $2)
      ORDER BY id`,
    [release, partition],
  );
  return rows;
}

const json = (v: unknown) => `<pre>${esc(JSON.stringify(v, null, 2))}</pre>`;

export async function evidencePageBody(db: Db, release: string, partition: string): Promise<{ title: string; body: string }> {
  const p = await partitionRow(db, release, partition);
  if (!p) throw new NotFoundError(`release ${release} has no partition ${partition}: the status page links every partition it shows`);
  const [receipts, log] = await Promise.all([partitionReceipts(db, release, partition), partitionLog(db, release, partition)]);
  const status = p.status === 'FAILED' ? `<span class="bad">FAILED</span>` : esc(p.status);
  const facts: [string, string][] = [
    ['Release', `<a href="/#${anchorOf(release)}">${esc(release)}</a>`],
    ['Partition', `${esc(p.id)} (#${num(p.seq)}, ${esc(p.kind)})`],
    ['Range', `${esc(instant(p.lower))} to ${esc(instant(p.upper))}`],
    ['Status', status],
    ['Attempt', num(p.attempt)],
    ['Lease', p.leased_by ? `${esc(p.leased_by)} until ${esc(instant(p.lease_expires_at))}` : '—'],
    ['Estimated rows', p.est_rows === null ? '—' : num(Number(p.est_rows))],
    ['Reason', p.reason ? `<strong class="reason">${esc(p.reason)}</strong>` : '—'],
    ['Updated', esc(instant(p.updated_at))],
  ];
  const receiptRows = receipts.map(
    (r) =>
      `<tr><td>${esc(r.id)}</td><td>${esc(r.kind)}</td><td class="n">${num(r.attempt)}</td><td class="n">${num(Number(r.rows_in))}</td>` +
      `<td class="n">${num(Number(r.rows_out))}</td><td><code>${esc(r.watermark)}</code></td><td>${esc(r.supersedes ?? '—')}</td><td>${esc(r.principal)}</td><td>${esc(instant(r.created_at))}</td></tr>`,
  );
  const logRows = log.map(
    (l) => `<tr><td>${esc(instant(l.at))}</td><td>${esc(l.action)}</td><td>${esc(l.principal)}</td><td>${esc(l.reason ?? '')}</td><td><code>${esc(JSON.stringify(l.detail))}</code></td></tr>`,
  );
  const body =
    `<h2>Partition ${esc(p.id)} of ${esc(release)}</h2>` +
    `<table class="facts">${facts.map(([k, v]) => `<tr><th>${k}</th><td>${v}</td></tr>`).join('')}</table>` +
    `<h3>Evidence</h3>${p.evidence === null ? '<p class="muted">None recorded.</p>' : `<div class="evidence">${json(p.evidence)}</div>`}` +
    `<h3>Receipts</h3>${
      receipts.length === 0
        ? '<p class="muted">No receipt: nothing of this partition is committed.</p>'
        : `<table><thead><tr><th>Id</th><th>Kind</th><th>Attempt</th><th>Rows in</th><th>Rows out</th><th>Watermark</th><th>Supersedes</th><th>By</th><th>At</th></tr></thead><tbody>${receiptRows.join('')}</tbody></table>`
    }` +
    `<h3>Log</h3>${
      log.length === 0
        ? '<p class="muted">No log entry names this partition.</p>'
        : `<table><thead><tr><th>At</th><th>Action</th><th>By</th><th>Reason</th><th>Detail</th></tr></thead><tbody>${logRows.join('')}</tbody></table>`
    }` +
    (p.status === 'FAILED' ? `<p>Once the cause is fixed, <code>genfill plan ${esc(release)}</code> queues it again.</p>` : '');
  return { title: `${p.id} · ${release} · genfill`, body };
}
