// Projector lag per dataset, as the status page shows it: what `genfill status --dataset`
// reports (@genfill/projector projectorStatus) — events not yet in the active generation's
// frontier, the age of the oldest one, when the frontier was last committed, and a poison stop.
import { projectorStatus } from '@genfill/projector';
import type { Conn, Db } from '@genfill/registry';

export interface ProjectorLag {
  dataset: string;
  /** The active generation whose frontier is read; null before a first generation exists. */
  generation: string | null;
  /** When the projector last committed a frontier for it; null: no projector yet. */
  frontierAt: Date | null;
  ageSeconds: number | null;
  /** Events of the source not yet in the frontier (counted up to 100,000). */
  pendingEvents: number;
  /** Age of the oldest of them (0 when none waits). */
  lagSeconds: number;
  /** The key a poison event stopped the projector at, when it did. */
  stoppedAt: unknown;
}

export async function projectorLag(conn: Conn | Db): Promise<ProjectorLag[]> {
  const { rows } = await conn.query<{ name: string }>('SELECT name FROM genfill.datasets ORDER BY name');
  const out: ProjectorLag[] = [];
  for (const { name } of rows) {
    const s = await projectorStatus(conn, name);
    if (!s) continue;
    const at = s.frontierUpdatedAt ? new Date(s.frontierUpdatedAt) : null;
    out.push({
      dataset: name,
      generation: s.generation,
      frontierAt: at,
      ageSeconds: at ? Math.max(0, (Date.now() - at.getTime()) / 1000) : null,
      pendingEvents: s.pendingEvents,
      lagSeconds: s.lagSeconds,
      stoppedAt: s.stop?.key ?? null,
    });
  }
  return out;
}
