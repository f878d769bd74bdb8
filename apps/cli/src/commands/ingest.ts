// `genfill ingest <dataset> <file.ndjson>`: apply a source's events to the dataset's ingress
// mirror (docs/ingress.md). Exit 0 applied; 2 a malformed line (all listed) or a file over
// the owner's pending bound (genfill.settings ingest.max_pending_events), nothing written; 3 not a mirror, busy (retry later), or a
// conflict (equal revision with another payload: nothing applied, recorded).
import { createReadStream } from 'node:fs';
import { access } from 'node:fs/promises';
import type { Command } from 'commander';
import { ingest } from '@genfill/capture';
import { InvalidInputError } from '@genfill/contracts';
import type { Context } from '../context.ts';
import { json } from '../io.ts';

const count = (n: number) => n.toLocaleString('en-US');

export function register(program: Command, run: (fn: (ctx: Context) => Promise<void>) => Promise<void>): void {
  program
    .command('ingest <dataset> <file>')
    .description(
      'apply NDJSON events {key, revision, op, row} to the dataset\'s ingress mirror in one transaction: the highest revision per key wins, ' +
        'stale and repeated events are no-ops. Exit 2 malformed (nothing written), 3 busy, conflict or not a mirror',
    )
    .option('--json', 'print the result as JSON')
    .action((dataset: string, file: string, opts: { json?: boolean }) =>
      run(async (ctx) => {
        await access(file).catch((err: Error) => {
          throw new InvalidInputError([{ path: file, message: `cannot read the file: ${err.message}` }]);
        });
        const result = await ingest(await ctx.db(), dataset, createReadStream(file, { highWaterMark: 256 * 1024 }));
        if (result.refused > 0) {
          ctx.io.err(
            `warning: ${count(result.refused)} events not applied: at or below a compacted tombstone's revision for keys genfill holds nothing for ` +
              `(first: ${result.refusedKeys.map((k) => JSON.stringify(k)).join(', ')}); see docs/ingress.md "Tombstones"`,
          );
        }
        if (opts.json) return json(ctx.io, result);
        ctx.io.out(
          `ingested ${file} into ${dataset} (${result.sourceTable}): ${count(result.events)} events, ` +
            `${count(result.applied)} applied and logged (${count(result.upserts)} upserts, ${count(result.deletes)} deletes), ` +
            `${count(result.stale)} stale or repeated`,
        );
      }),
    );
}
