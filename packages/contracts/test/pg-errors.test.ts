import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import {
  errorFromPg,
  GenerationGoneError,
  IngressBusyError,
  IngressConflictError,
  InvalidInputError,
  isPgError,
  NotFoundError,
  PermissionDeniedError,
  PG_ERRORS,
  type PgError,
  ProjectorBehindError,
  RefusedError,
  ReleaseConflictError,
  SQLSTATE,
  StaleLeaseError,
} from '../src/index.ts';

const REGISTRY = fileURLToPath(new URL('../../registry/', import.meta.url));

/** Every SQL file under packages/registry (migrations, function files). */
function sqlFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.name === 'node_modules' ? [] : e.isDirectory() ? sqlFiles(join(dir, e.name)) : e.name.endsWith('.sql') ? [join(dir, e.name)] : [],
  );
}

/** The genfill codes raised anywhere in the registry's SQL. */
function raisedGenfillCodes(): Set<string> {
  const codes = new Set<string>();
  for (const file of sqlFiles(REGISTRY)) {
    for (const m of readFileSync(file, 'utf8').matchAll(/ERRCODE\s*=\s*'(GF[0-9A-Z]{3})'/g)) codes.add(m[1]!);
  }
  return codes;
}

/** What node-postgres gives for an error the server raised. */
function pgError(code: string, fields: Partial<PgError> = {}): PgError {
  return Object.assign(new Error(fields.message ?? `raised ${code}`), { severity: 'ERROR', code, ...fields }) as PgError;
}

describe('the one table from SQLSTATE to error class', () => {
  it('has exactly one entry for every genfill code the registry SQL raises, and no entry for a code it never raises', () => {
    const raised = raisedGenfillCodes();
    expect(raised.size).toBeGreaterThanOrEqual(10);
    const mapped = Object.keys(PG_ERRORS).filter((c) => c.startsWith('GF'));
    expect(mapped.sort()).toEqual([...raised].sort());
    // One name per code in SQLSTATE too: the table's keys are those names' values.
    const named = Object.values(SQLSTATE).filter((c) => c.startsWith('GF'));
    expect(new Set(named).size).toBe(named.length);
    expect(named.sort()).toEqual(mapped.sort());
  });

  it.each(Object.entries(PG_ERRORS))('maps %s to the class the table names, keeping the server error as its cause', (code, entry) => {
    const raised = pgError(code, { detail: '[]' });
    const err = errorFromPg(raised);
    expect(err).toBeInstanceOf(entry.class);
    expect((err as Error).cause).toBe(raised);
  });

  it('decides the codes the call sites used to disagree on: GFN01 is not found, GFS01 a stale lease, 42501 a permission', () => {
    expect(errorFromPg(pgError('GFN01', { message: 'release x@1 does not exist' }))).toBeInstanceOf(NotFoundError);
    const stale = errorFromPg(pgError('GFS01'), { release: 'r@1', partition: 'p1', attempt: 3 }) as StaleLeaseError;
    expect(stale).toBeInstanceOf(StaleLeaseError);
    expect(stale).toMatchObject({ release: 'r@1', partition: 'p1', attempt: 3, exitCode: 3 });
    const lease = errorFromPg(pgError('GFS01', { message: 'cutover lease: cutover #4 of r@1 is no longer held by h' }), { release: 'r@1' });
    expect(lease).toBeInstanceOf(StaleLeaseError);
    expect((lease as Error).message).toBe('cutover lease: cutover #4 of r@1 is no longer held by h');
    expect(errorFromPg(pgError('42501', { message: 'permission denied for table releases' }))).toBeInstanceOf(PermissionDeniedError);
    expect((errorFromPg(pgError('42501', { message: 'permission denied' })) as Error).message).toMatch(/genfill_operator role/);
  });

  it('fills each class from the DETAIL and HINT the SQL sends and from what the call site knows', () => {
    expect(errorFromPg(pgError('GFC01', { detail: 'abc' }), { release: 'r@1', digest: 'def' })).toMatchObject({
      release: 'r@1',
      existingDigest: 'abc',
      submittedDigest: 'def',
    });
    expect(errorFromPg(pgError('GFO01', { detail: 'other@1', hint: '[a,b)' }), { release: 'r@1' })).toMatchObject({ other: 'other@1', otherRange: '[a,b)' });
    expect(errorFromPg(pgError('GFG01', { message: 'RETIRED at …', detail: 'RETIRED' }), { dataset: 'd', generation: 'g1' })).toMatchObject({
      dataset: 'd',
      generation: 'g1',
      state: 'RETIRED',
      reason: 'RETIRED at …',
    });
    expect(errorFromPg(pgError('GFL01', { detail: '[{"partition": "p1"}]' }))).toMatchObject({ partitions: [{ partition: 'p1' }] });
    expect((errorFromPg(pgError('GFI01', { detail: '[{"line": 3, "message": "no key"}, {"line": null, "message": "too many"}]' })) as InvalidInputError).problems).toEqual([
      { path: 'line 3', message: 'no key' },
      { path: '', message: 'too many' },
    ]);
    expect(errorFromPg(pgError('GFB01', { detail: '{"pending": 9, "events": 2, "max": 10}' }), { dataset: 'd', retryAfterSeconds: 7 })).toMatchObject({
      pending: 9,
      events: 2,
      max: 10,
      retryAfterSeconds: 7,
    });
    expect(errorFromPg(pgError('GFX01', { detail: '[{"key": {"k": 1}, "revision": 2, "incoming": [], "stored": null}]' }), { dataset: 'd' })).toMatchObject({
      conflicts: [{ key: { k: 1 }, revision: 2 }],
      conflictIds: [],
    });
    expect((errorFromPg(pgError('22023', { message: 'a reader lease lasts 1 s to 24 h' }), { input: 'lease' }) as InvalidInputError).problems).toEqual([
      { path: 'lease', message: 'a reader lease lasts 1 s to 24 h' },
    ]);
    expect(errorFromPg(pgError('GFB01'))).toBeInstanceOf(IngressBusyError);
    expect(errorFromPg(pgError('GFX01'))).toBeInstanceOf(IngressConflictError);
    expect(errorFromPg(pgError('GFG01'))).toBeInstanceOf(GenerationGoneError);
    expect(errorFromPg(pgError('GFL01'))).toBeInstanceOf(ProjectorBehindError);
    expect(errorFromPg(pgError('GFC01'))).toBeInstanceOf(ReleaseConflictError);
  });

  it('lets a call site say what a code means there, the class staying the table\'s', () => {
    const err = errorFromPg(pgError('42501', { message: 'permission denied for schema public' }), {
      messages: { [SQLSTATE.insufficientPrivilege]: (e) => `genfill_owner may not create the view (${e.message}): GRANT CREATE ON SCHEMA public TO genfill_owner` },
    });
    expect(err).toBeInstanceOf(PermissionDeniedError);
    expect(err).toBeInstanceOf(RefusedError);
    expect((err as Error).message).toBe('genfill_owner may not create the view (permission denied for schema public): GRANT CREATE ON SCHEMA public TO genfill_owner');
  });

  it('gives back what is not a server error, or a code outside the table, unchanged', () => {
    const plain = new Error('boom');
    expect(errorFromPg(plain)).toBe(plain);
    const retried = pgError(SQLSTATE.serializationFailure);
    expect(errorFromPg(retried)).toBe(retried);
    const socket = Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' });
    expect(isPgError(socket)).toBe(false);
    expect(errorFromPg(socket)).toBe(socket);
    expect(errorFromPg(null)).toBeNull();
  });
});
