import { describe, expect, it } from 'vitest';
import { canTransition, OPEN_STATES, RELEASE_STATES, TRANSITIONS, type ReleaseState } from '../src/index.ts';

function reachable(from: ReleaseState): Set<ReleaseState> {
  const seen = new Set<ReleaseState>([from]);
  const todo = [from];
  while (todo.length) {
    for (const n of TRANSITIONS[todo.pop()!]) {
      if (!seen.has(n)) {
        seen.add(n);
        todo.push(n);
      }
    }
  }
  return seen;
}

describe('the release state machine', () => {
  it('reaches every state from DRAFT', () => {
    expect([...reachable('DRAFT')].sort()).toEqual([...RELEASE_STATES].sort());
  });

  it('supports the seed order and the short-freeze order', () => {
    const path = (...s: ReleaseState[]) => s.slice(1).every((to, i) => canTransition(s[i]!, to));
    expect(path('DRAFT', 'SNAPSHOT_PINNED', 'BUILDING', 'INGRESS_SEALED', 'CAUGHT_UP', 'RECONCILED', 'APPROVED', 'ACTIVE', 'RETIRED')).toBe(true);
    expect(path('DRAFT', 'SNAPSHOT_PINNED', 'BUILDING', 'BUILT', 'RECONCILED', 'APPROVED', 'INGRESS_SEALED', 'CAUGHT_UP', 'ACTIVE')).toBe(true);
  });

  it('lets a failed cutover return to APPROVED and a reconciliation failure leave by repair or cancel', () => {
    expect(canTransition('INGRESS_SEALED', 'APPROVED')).toBe(true);
    expect(canTransition('CAUGHT_UP', 'APPROVED')).toBe(true);
    expect(TRANSITIONS.RECONCILIATION_REQUIRED).toEqual(['BUILDING', 'RECONCILED', 'CANCELLED']);
  });

  it('ends in RETIRED and CANCELLED, and never skips building or approval to reach ACTIVE', () => {
    expect(TRANSITIONS.RETIRED).toEqual([]);
    expect(TRANSITIONS.CANCELLED).toEqual([]);
    for (const s of ['DRAFT', 'SNAPSHOT_PINNED', 'BUILDING', 'BUILT', 'RECONCILED'] as const) expect(canTransition(s, 'ACTIVE')).toBe(false);
    expect(canTransition('ACTIVE', 'CANCELLED')).toBe(false);
  });

  it('counts every state before cutover as open', () => {
    expect(OPEN_STATES).not.toContain('ACTIVE');
    expect(OPEN_STATES).toContain('RECONCILIATION_REQUIRED');
    expect(OPEN_STATES).toContain('DRAFT');
  });
});
