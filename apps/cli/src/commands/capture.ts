// `genfill capture install|remove|status`: statement-level triggers that append every change
// of a source table to genfill.change_log (docs/capture.md). install and remove run as the
// table's owner who is a member of genfill_service; both are idempotent. `install --ingress`
// makes the table an ingress mirror instead (docs/ingress.md).
import type { Command } from 'commander';
import { captureStatus, type CaptureStatus, installCapture, installIngressMirror, removeCapture } from '@genfill/capture';
import type { Context } from '../context.ts';
import { json } from '../io.ts';

const list = (v: string) => v.split(',').map((s) => s.trim());

function size(bytes: number): string {
  const units = ['B', 'kB', 'MB', 'GB', 'TB'];
  let n = bytes;
  let u = 0;
  while (n >= 1024 && u < units.length - 1) {
    n /= 1024;
    u += 1;
  }
  return `${u === 0 ? n : n.toFixed(1)} ${units[u]}`;
}

function printStatus(ctx: Context, rows: CaptureStatus[]): void {
  if (rows.length === 0) {
    ctx.io.out('no table is captured (genfill capture install <table>)');
    return;
  }
  for (const c of rows) {
    const where = c.mode === 'trigger' ? `${c.members.length} table${c.members.length === 1 ? '' : 's'}` : 'ingress mirror';
    ctx.io.out(`${c.table}  ${c.mode}  key (${c.key.join(', ')})  ${c.healthy ? 'ok' : 'BROKEN'}  ${where}  installed ${c.installedAt} by ${c.installedBy}`);
    for (const m of c.members) {
      const states = Object.entries(m.triggers).map(([e, s]) => `${e} ${s === null ? 'MISSING' : s === 'A' ? 'always' : `NOT ALWAYS (${s})`}`);
      ctx.io.out(`  ${m.table}: ${states.join(', ')}`);
    }
    for (const p of c.problems) ctx.io.out(`  problem: ${p}`);
    const pending = c.oldestPending
      ? `oldest pending event #${c.oldestPending.eventId} (txid ${c.oldestPending.txid}, ${c.oldestPending.loggedAt})` +
        (c.oldestPending.basis === 'no-consumer' ? ', no consumer has a frontier yet' : '')
      : 'nothing pending';
    ctx.io.out(`  log: ${c.log.events} events, ${size(c.log.bytes)}; ${pending}`);
    if (c.openReleases.length > 0) ctx.io.out(`  open releases on it: ${c.openReleases.join(', ')}`);
  }
}

export function register(program: Command, run: (fn: (ctx: Context) => Promise<void>) => Promise<void>): void {
  const capture = program
    .command('capture')
    .description('change capture: statement-level triggers that append every change of a source table to genfill.change_log');

  capture
    .command('install <table>')
    .description(
      'capture a table (and every partition of it): four ENABLE ALWAYS statement triggers, TRUNCATE refused, DDL that would lose writes refused. ' +
        'Run as the table\'s owner, a member of genfill_service. Idempotent: a second run changes nothing, or repairs. Exit 3 refused, nothing written',
    )
    .option('--key <cols>', 'the key columns, comma-separated: a NOT DEFERRABLE primary key or unique constraint on NOT NULL columns (default: the primary key)', list)
    .option('--ingress', 'make the table an ingress mirror only genfill writes (`genfill ingest`), instead of capturing it by triggers')
    .option('--json', 'print the result as JSON')
    .action((table: string, opts: { key?: string[]; ingress?: boolean; json?: boolean }) =>
      run(async (ctx) => {
        if (opts.ingress) {
          const m = await installIngressMirror(await ctx.db(), table);
          if (opts.json) return json(ctx.io, m);
          ctx.io.out(
            m.status === 'installed'
              ? `${m.table} is an ingress mirror (key ${m.key.join(', ')}): only genfill writes it; feed it with genfill ingest`
              : `already an ingress mirror: ${m.table} (key ${m.key.join(', ')})`,
          );
          return;
        }
        const r = await installCapture(await ctx.db(), { table, key: opts.key });
        if (opts.json) return json(ctx.io, r);
        for (const g of r.granted) ctx.io.out(`granted ${g} (the capture triggers read the table to decide deletes)`);
        const tables = `${r.members.length} table${r.members.length === 1 ? '' : 's'}`;
        if (r.status === 'unchanged') {
          ctx.io.out(`already captured: ${r.table} (key ${r.key.join(', ')}), triggers ENABLE ALWAYS on ${tables}`);
        } else {
          ctx.io.out(
            `${r.status === 'installed' ? 'captured' : 'repaired the capture of'} ${r.table} (key ${r.key.join(', ')}, ${r.constraint}): ` +
              `triggers on ${tables}${r.changed.length > 0 && r.status === 'repaired' ? ` (remade on ${r.changed.join(', ')})` : ''}; every write now reaches genfill.change_log`,
          );
        }
      }),
    );

  capture
    .command('remove <table>')
    .description('stop capturing a table: drops its triggers (the log stays). Refused (exit 3) while a release whose source it is is open. Run as the table\'s owner')
    .option('--json', 'print the result as JSON')
    .action((table: string, opts: { json?: boolean }) =>
      run(async (ctx) => {
        const r = await removeCapture(await ctx.db(), { table });
        if (opts.json) return json(ctx.io, r);
        ctx.io.out(
          r.status === 'removed'
            ? `removed the capture of ${r.table}: dropped its triggers on ${r.dropped.length} table${r.dropped.length === 1 ? '' : 's'}; its ${r.events} events stay in the change log`
            : `${r.table} is not captured: nothing to remove`,
        );
      }),
    );

  capture
    .command('status [table]')
    .description('every captured table: mode, key, each trigger on the table and its partitions, problems, log size and the oldest pending event')
    .option('--json', 'print the result as JSON')
    .action((table: string | undefined, opts: { json?: boolean }) =>
      run(async (ctx) => {
        const rows = await captureStatus(await ctx.db(), { table });
        if (opts.json) return json(ctx.io, rows);
        printStatus(ctx, rows);
      }),
    );
}
