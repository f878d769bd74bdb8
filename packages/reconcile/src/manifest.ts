// Release-wide checks: manifest closure and the coverage proof re-derived from the stored
// partitions, partition status, and the pinned dependencies recomputed in the snapshot.
import { coverageProof, InvalidInputError, quoteQualified, type CoverageProof } from '@genfill/contracts';
import { relationColumns, type Conn } from '@genfill/registry';
import type { FindingsWriter } from './findings.ts';
import { hashOf, rootOf } from './roots.ts';
import { buildPartitions, type Subject } from './subject.ts';

export interface ClosureSummary {
  ok: boolean;
  partitions: number;
  build: number;
  manifestCount: number | null;
  boundariesSha256: string | null;
  proof: CoverageProof | null;
}

export function checkClosure(s: Subject, w: FindingsWriter): ClosureSummary {
  const issue = (detail: Record<string, unknown>) => w.add({ partition: null, keyJson: null, kind: 'coverage', check: 'manifest', detail });
  const before = w.count;
  const build = buildPartitions(s);
  let proof: CoverageProof | null = null;
  if (!s.manifest) {
    issue({ problem: 'the release has no manifest' });
  } else {
    try {
      proof = coverageProof({ from: s.from, to: s.to, timezone: s.timezone, every: s.every }, build);
    } catch (err) {
      if (!(err instanceof InvalidInputError)) throw err;
      issue({ problem: 'the coverage proof cannot be derived', message: err.message });
    }
    if (proof) {
      if (!proof.contiguous) issue({ problem: 'build partitions are not contiguous' });
      if (!proof.exactEnds) issue({ problem: 'build partitions do not start at from and end at to', from: s.from, to: s.to });
      if (proof.gaps > 0) issue({ problem: 'gaps in [from, to)', gaps: proof.gaps });
      if (proof.overlaps > 0) issue({ problem: 'overlapping partitions', overlaps: proof.overlaps });
      if (proof.boundariesSha256 !== s.manifest.boundariesSha256) {
        issue({ problem: 'stored partitions differ from the manifest', manifest: s.manifest.boundariesSha256, derived: proof.boundariesSha256 });
      }
      if (s.manifest.proofSha256 !== s.manifest.boundariesSha256) {
        issue({ problem: 'the stored coverage proof differs from the manifest', proof: s.manifest.proofSha256, manifest: s.manifest.boundariesSha256 });
      }
    }
    if (s.manifest.count !== s.partitions.length) {
      issue({ problem: 'partition count differs from the manifest', manifest: s.manifest.count, stored: s.partitions.length });
    }
  }
  for (const p of s.partitions) {
    if (p.status !== 'BUILT') w.add({ partition: p.id, keyJson: null, kind: 'partition_status', check: 'manifest', detail: { status: p.status } });
  }
  return {
    ok: w.count === before,
    partitions: s.partitions.length,
    build: build.length,
    manifestCount: s.manifest?.count ?? null,
    boundariesSha256: proof?.boundariesSha256 ?? null,
    proof,
  };
}

export interface DependencySummary {
  relation: string;
  pinned: { rows: string; hash: string };
  now: { rows: string; hash: string };
  ok: boolean;
}

/** A dependency's content as the pin defines it: row count and root over every column in order. */
async function relationContent(conn: Conn, relation: string): Promise<{ rows: string; hash: string }> {
  const cols = (await relationColumns(conn, quoteQualified(relation))).map((c) => c.name);
  const { rows } = await conn.query<{ n: string; h: string }>(
    `SELECT count(*)::text AS n, ${rootOf(hashOf(cols, 't'))} AS h FROM ${quoteQualified(relation)} AS t`,
  );
  return { rows: rows[0]!.n, hash: rows[0]!.h };
}

/**
 * Every pinned dependency recomputed in the snapshot: the dual compute read these rows, so
 * a dependency that moved since plan explains (and is) a difference.
 */
export async function checkDependencies(conn: Conn, s: Subject, w: FindingsWriter): Promise<DependencySummary[]> {
  const out: DependencySummary[] = [];
  for (const pin of s.pins) {
    const now = await relationContent(conn, pin.relation);
    const ok = now.rows === pin.rowCount && now.hash === pin.contentHash;
    if (!ok) {
      w.add({
        partition: null,
        keyJson: null,
        kind: 'dependency_changed',
        check: 'dependency',
        detail: { relation: pin.relation, pinned: { rows: pin.rowCount, hash: pin.contentHash }, now },
      });
    }
    out.push({ relation: pin.relation, pinned: { rows: pin.rowCount, hash: pin.contentHash }, now, ok });
  }
  return out;
}
