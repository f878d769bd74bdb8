// The read model behind `genfill status` and (later) GET /releases/:id, read in one snapshot.
import { withTransaction, type Db } from './db.ts';
import { findManifest, listPartitions, partitionCounts, dependencyPins } from './manifest.ts';
import { getRelease, listReleases, releaseLog } from './releases.ts';

function iso(d: Date | null): string | null {
  return d ? d.toISOString() : null;
}

export async function releaseStatus(db: Db, id: string) {
  return withTransaction(
    db,
    async (conn) => {
      const r = await getRelease(conn, id);
      const manifest = await findManifest(conn, id);
      const parts = manifest ? await listPartitions(conn, id) : [];
      return {
        release: r.id,
        state: r.state,
        stateChangedAt: iso(r.state_changed_at),
        paused: { operator: r.operator_paused, throttle: r.throttle_paused },
        dataset: r.dataset,
        generation: r.generation,
        expectedActive: r.expected_active,
        digest: r.digest,
        transformDigest: r.transform_digest,
        range: { from: iso(r.range_from), to: iso(r.range_to), timezone: r.timezone, every: r.every },
        owner: r.owner,
        approvalsRequired: r.approvals_required,
        deadline: iso(r.deadline),
        submittedBy: r.submitted_by,
        submittedAt: iso(r.submitted_at),
        manifest: manifest
          ? {
              partitions: manifest.partition_count,
              boundariesSha256: manifest.boundaries_sha256,
              coverage: manifest.coverage_proof,
              createdBy: manifest.created_by,
              createdAt: iso(manifest.created_at),
            }
          : null,
        counts: manifest ? await partitionCounts(conn, id) : {},
        dependencies: await dependencyPins(conn, id),
        partitions: parts.map((p) => ({
          id: p.id,
          seq: p.seq,
          kind: p.kind,
          lower: iso(p.lower),
          upper: iso(p.upper),
          status: p.status,
          attempt: p.attempt,
          estRows: p.est_rows === null ? null : Number(p.est_rows),
          reason: p.reason,
          updatedAt: iso(p.updated_at),
        })),
        history: (await releaseLog(conn, id)).map((l) => ({
          action: l.action,
          from: l.from_state,
          to: l.to_state,
          principal: l.principal,
          at: iso(l.at),
          reason: l.reason,
          detail: l.detail,
        })),
      };
    },
    'REPEATABLE READ',
  );
}

export type ReleaseStatus = Awaited<ReturnType<typeof releaseStatus>>;

export async function releaseList(db: Db) {
  const conn = await db.connect();
  try {
    return (await listReleases(conn)).map((r) => ({
      release: r.id,
      state: r.state,
      dataset: r.dataset,
      generation: r.generation,
      paused: { operator: r.operator_paused, throttle: r.throttle_paused },
      range: { from: iso(r.range_from), to: iso(r.range_to) },
      submittedBy: r.submitted_by,
      submittedAt: iso(r.submitted_at),
    }));
  } finally {
    conn.release();
  }
}
