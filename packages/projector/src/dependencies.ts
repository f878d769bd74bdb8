// The captured dependencies of a dataset, checked wherever events are applied to one of its
// generations (issue 29): a projector batch, a catch-up round, a cutover's switch over
// (B, S_cut] and a rollback's replay and switch over (F, S_rb]. A change flags the dataset
// DEPENDENCY_STALE and moves its open releases to RECONCILIATION_REQUIRED; the cutover refuses
// instead while it holds the seal (packages/switch, dependencies.ts).
import type { Conn } from '@genfill/registry';
import { dependencyChangedStatement } from './statement.ts';

/** The captured dependencies among `relations` with an event visible in `range.to` and not in `range.from`. */
export async function changedDependencies(conn: Pick<Conn, 'query'>, relations: readonly string[], range: { from: string; to: string }): Promise<string[]> {
  const changed: string[] = [];
  for (const relation of relations) {
    const d = dependencyChangedStatement(relation, range);
    if ((await conn.query<{ changed: boolean }>(d.text, d.values)).rows[0]!.changed) changed.push(relation);
  }
  return changed;
}

/**
 * Flag `dataset` DEPENDENCY_STALE for `relations` and move its open releases to
 * RECONCILIATION_REQUIRED (genfill.mark_dependency_stale), in the caller's transaction: the
 * releases moved.
 */
export async function markDependencyStale(conn: Pick<Conn, 'query'>, dataset: string, relations: readonly string[]): Promise<string[]> {
  const { rows } = await conn.query<{ moved: string[] }>('SELECT genfill.mark_dependency_stale($1, $2) AS moved', [dataset, relations]);
  return rows[0]!.moved;
}
