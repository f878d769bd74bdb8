// The one place where errors become exit codes and operator-facing messages.
import { exitCodeOf, GenfillError, InvalidInputError, type ExitCode } from '@genfill/contracts';
import type { Io } from './io.ts';

const PG_CONNECTION_CODES = new Set(['ECONNREFUSED', 'ENOTFOUND', 'ETIMEDOUT', 'ECONNRESET', '57P03', '3D000', '28000', '28P01']);

export function report(io: Io, err: unknown): ExitCode {
  if (err instanceof InvalidInputError) {
    io.err(`invalid: ${err.problems.length} problem${err.problems.length === 1 ? '' : 's'}, nothing was written`);
    for (const p of err.problems) io.err(`  ${p.path ? `${p.path}: ` : ''}${p.message}`);
    return err.exitCode;
  }
  if (err instanceof GenfillError) {
    io.err(`refused: ${err.message}`.replace(/^refused: /, err.exitCode === 3 ? 'refused: ' : 'error: '));
    return exitCodeOf(err);
  }
  const code = (err as { code?: string }).code;
  if (code && PG_CONNECTION_CODES.has(code)) {
    io.err(`error: cannot reach the database (${code}): ${(err as Error).message}; check DATABASE_URL`);
    return 1;
  }
  io.err(`internal error: ${(err as Error)?.stack ?? String(err)}`);
  return 1;
}
