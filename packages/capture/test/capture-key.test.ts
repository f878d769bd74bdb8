// Which constraint a capture records as the key (SPEC "Capture rules": a NOT DEFERRABLE
// primary key or unique constraint on NOT NULL columns).
import { describe, expect, it } from 'vitest';
import { InvalidInputError } from '@genfill/contracts';
import { chooseKey } from '../src/capture-checks.ts';
import { CaptureRefusedError, type KeyCandidate } from '../src/index.ts';

const pk = (columns: string[], extra: Partial<KeyCandidate> = {}): KeyCandidate => ({
  constraint_name: 't_pkey',
  kind: 'PRIMARY KEY',
  columns,
  is_deferrable: false,
  nullable: [],
  ...extra,
});
const uq = (name: string, columns: string[], extra: Partial<KeyCandidate> = {}): KeyCandidate => ({
  constraint_name: name,
  kind: 'UNIQUE',
  columns,
  is_deferrable: false,
  nullable: [],
  ...extra,
});

function refusal(fn: () => unknown): string[] {
  try {
    fn();
  } catch (err) {
    if (err instanceof CaptureRefusedError) return err.problems;
    throw err;
  }
  throw new Error('not refused');
}

describe('chooseKey', () => {
  it('takes the primary key by default, and the named unique constraint with --key', () => {
    const c = [pk(['id']), uq('t_code_key', ['code'])];
    expect(chooseKey('public.t', c)).toEqual({ constraint: 't_pkey', kind: 'PRIMARY KEY', columns: ['id'] });
    expect(chooseKey('public.t', c, ['code'])).toEqual({ constraint: 't_code_key', kind: 'UNIQUE', columns: ['code'] });
  });

  it('matches --key as a set of columns, keeping the constraint\'s order', () => {
    expect(chooseKey('public.t', [pk(['a', 'b'])], ['b', 'a']).columns).toEqual(['a', 'b']);
  });

  it('refuses a DEFERRABLE key, naming why it would invert per-key order', () => {
    const problems = refusal(() => chooseKey('public.t', [pk(['id'], { is_deferrable: true })]));
    expect(problems).toHaveLength(1);
    expect(problems[0]).toMatch(/t_pkey \(id\) is DEFERRABLE: .*inverts its order in the log; make it NOT DEFERRABLE/);
  });

  it('refuses a unique constraint on a NULL-able column and a table without any key', () => {
    expect(refusal(() => chooseKey('public.t', [uq('t_code_key', ['code'], { nullable: ['code'] })]))[0]).toMatch(/allows NULL in code/);
    expect(refusal(() => chooseKey('public.t', []))[0]).toMatch(/no PRIMARY KEY or UNIQUE constraint: .*UNIQUE USING INDEX/);
  });

  it('falls back to the one usable unique constraint when the primary key is deferrable', () => {
    expect(chooseKey('public.t', [pk(['id'], { is_deferrable: true }), uq('t_code_key', ['code'])]).constraint).toBe('t_code_key');
  });

  it('asks for --key when several unique constraints could be the key', () => {
    expect(() => chooseKey('public.t', [uq('a_key', ['a']), uq('b_key', ['b'])])).toThrow(InvalidInputError);
  });

  it('refuses --key naming columns no constraint covers exactly', () => {
    expect(refusal(() => chooseKey('public.t', [pk(['a', 'b'])], ['a']))[0]).toMatch(/no PRIMARY KEY or UNIQUE constraint on exactly \(a\)/);
  });
});
