// Dependencies are checked wherever events are applied (issue 29, SPEC invariant 10): the
// projector's batches (packages/projector, batch.ts), and here the catch-up rounds, a rollback's
// replay rounds and switch over (F, S_rb], and a cutover's switch over (B, S_cut].
//   - Outside a freeze a change flags the dataset DEPENDENCY_STALE and moves its open releases to
//     RECONCILIATION_REQUIRED, in the transaction that applied the events (as a batch does).
//   - Inside a cutover's freeze (the round to the barrier, the switch) a change refuses: the
//     sequence undoes the seal, then flags the dataset in the undo's transaction, and the
//     refusal names the tables (DependencyChangedError, exit 3). A flag written inside the
//     round or the switch would be rolled back with it.
//   - A cutover also proves the release's own pins: before the seal it recomputes each declared
//     dependency's content hash against the one pinned at plan (a change no event shows — a
//     trigger bypassed — is seen too), and inside the freeze it reads only the captured events
//     in (pin, S_cut], so the freeze does not grow with the dependency's size.
import { changedDependencies, markDependencyStale, type ProjectedDataset } from '@genfill/projector';
import { contentHash, withTransaction, type Conn, type Db } from '@genfill/registry';
import { SwitchRefused } from './sequence.ts';

/** A refusal of the switch sequence that flags `relations` once the seal is undone. */
export function dependenciesChanged(relations: string[], message: string): SwitchRefused {
  return new SwitchRefused(message, 'dependencies', undefined, relations);
}

const named = (relations: readonly string[]) => relations.join(', ');

/**
 * The captured dependencies of `ds` with events in `range`: flagged in `conn`'s transaction
 * (`flag`), or refused (`refuse`, inside a freeze). The tables that changed.
 */
export async function checkDependencies(conn: Conn, ds: ProjectedDataset, range: { from: string; to: string }, how: 'flag' | 'refuse'): Promise<string[]> {
  const changed = await changedDependencies(conn, ds.dependencies, range);
  if (changed.length === 0) return changed;
  if (how === 'refuse') {
    throw dependenciesChanged(changed, `dependency ${named(changed)} of ${ds.name} changed in (${range.from}, ${range.to}], inside the freeze`);
  }
  await markDependencyStale(conn, ds.name, changed);
  return changed;
}

interface Pin {
  relation: string;
  row_count: string;
  content_hash: string;
  pin: string;
  /** The captured table as genfill.change_log spells it; null when it is not captured (any more). */
  log: string | null;
}

async function pinsOf(conn: Pick<Conn, 'query'>, release: string): Promise<Pin[]> {
  const { rows } = await conn.query<Pin>(
    `SELECT p.relation, p.row_count::text, p.content_hash::text, coalesce(p.pinned_snapshot, f.floor)::text AS pin, c.source_table AS log
       FROM genfill.dependency_pins p
       LEFT JOIN genfill.release_floors f ON f.release = p.release
       LEFT JOIN genfill.captures c ON c.relid = to_regclass(p.relation) AND c.mode = 'trigger'
      WHERE p.release = $1 ORDER BY p.relation`,
    [release],
  );
  return rows;
}

/**
 * Before the seal: each declared dependency's content hash, recomputed, against the one pinned
 * at plan. Refuses naming the tables that differ.
 */
export async function checkPinnedHashes(db: Db, release: string): Promise<void> {
  const differ = await withTransaction(db, async (conn) => {
    const out: string[] = [];
    for (const p of await pinsOf(conn, release)) {
      const now = await contentHash(conn, p.relation);
      if (now.contentHash !== p.content_hash || now.rowCount !== p.row_count) out.push(p.relation);
    }
    return out;
  });
  if (differ.length > 0) {
    throw dependenciesChanged(
      differ,
      `the content of dependency ${named(differ)} is not the one pinned when ${release} was planned: its rows were built from other values; submit a new release`,
    );
  }
}

/**
 * Inside the switch: the captured events of each declared dependency in (pin, S_cut]. A
 * dependency that is no longer captured cannot be checked there: refused, with the command.
 */
export async function checkPinnedEvents(conn: Conn, release: string, to: string): Promise<string[]> {
  const pins = await pinsOf(conn, release);
  const uncaptured = pins.filter((p) => p.log === null).map((p) => p.relation);
  if (uncaptured.length > 0) {
    throw new SwitchRefused(
      `dependency ${named(uncaptured)} of ${release} is not captured: a change to it would go unseen; as the table's owner run ` +
        `${uncaptured.map((t) => `\`genfill capture install ${t}\``).join(' and ')}, then cut over again`,
      'dependencies',
    );
  }
  const changed: string[] = [];
  for (const p of pins) {
    if ((await changedDependencies(conn, [p.log!], { from: p.pin, to })).length > 0) changed.push(p.log!);
  }
  return changed;
}

/**
 * Before the seal, after the cutover's own round: a dependency change that round (or a
 * projector batch) flagged since the hashes were compared refuses by name, not by the seal's
 * lost compare-and-swap.
 */
export async function checkNotStale(db: Pick<Db, 'query'>, dataset: string): Promise<void> {
  const { rows } = await db.query<{ relations: string[] }>(
    `SELECT stale_relations AS relations FROM genfill.dataset_flags WHERE dataset = $1 AND dependency_stale_since IS NOT NULL`,
    [dataset],
  );
  if (rows[0]) throw dependenciesChanged(rows[0].relations, `dataset ${dataset} is DEPENDENCY_STALE: dependency ${named(rows[0].relations)} changed`);
}
