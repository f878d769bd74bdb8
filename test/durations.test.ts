// Every duration genfill reads, from the environment or a flag, in one grammar (issue 27):
// `2m` means two minutes to a PostgreSQL timeout, a retention and the freeze bound alike.
import { Command, CommanderError } from 'commander';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '@genfill/contracts';
import { register } from '../apps/cli/src/commands/projector.ts';

/** The CLI's projector verbs as commander parses them, without running anything. */
async function parsed(argv: string[]): Promise<Record<string, unknown>> {
  const program = new Command('genfill').exitOverride().configureOutput({ writeErr: () => undefined, writeOut: () => undefined });
  register(program, async () => undefined);
  await program.parseAsync(argv, { from: 'user' });
  return program.commands.find((c) => c.name() === argv[0])!.opts();
}

describe('one duration grammar', () => {
  it('reads 2m as two minutes in GENFILL_LOCK_TIMEOUT, GENFILL_TOMBSTONE_RETENTION, and --max-freeze alike', async () => {
    const config = loadConfig({ GENFILL_LOCK_TIMEOUT: '2m', GENFILL_TOMBSTONE_RETENTION: '2m', GENFILL_READER_LEASE_TTL: '2m' });
    expect(config.GENFILL_LOCK_TIMEOUT).toBe(120_000);
    // The retention settings count seconds.
    expect(config.GENFILL_TOMBSTONE_RETENTION).toBe(120);
    expect(config.GENFILL_READER_LEASE_TTL).toBe(120);
    expect((await parsed(['cutover', 'r@1', '--max-freeze', '2m'])).maxFreeze).toBe(120_000);
    expect((await parsed(['rollback', 'r@1', '--max-freeze', '2m'])).maxFreeze).toBe(120_000);
    expect((await parsed(['seal', 'r@1', '--wait', '2m'])).wait).toBe(120_000);
  });

  it('keeps what a bare number meant to each: milliseconds for a PostgreSQL timeout, seconds for --max-freeze', async () => {
    expect(loadConfig({ GENFILL_STATEMENT_TIMEOUT: '500' }).GENFILL_STATEMENT_TIMEOUT).toBe(500);
    expect(loadConfig({ GENFILL_STATEMENT_TIMEOUT: '2min' }).GENFILL_STATEMENT_TIMEOUT).toBe(120_000);
    expect((await parsed(['cutover', 'r@1', '--max-freeze', '45'])).maxFreeze).toBe(45_000);
    expect((await parsed(['cutover', 'r@1'])).maxFreeze).toBe(30_000);
  });

  it('refuses a malformed --max-freeze as invalid input, naming the forms it takes', async () => {
    const err = await parsed(['cutover', 'r@1', '--max-freeze', '2x']).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(CommanderError);
    expect((err as CommanderError).code).toBe('commander.invalidArgument');
    expect((err as CommanderError).message).toMatch(/--max-freeze <duration>.*must be a duration: a number and a unit ms, s, m \(minutes, also min\), h or d/);
  });
});
