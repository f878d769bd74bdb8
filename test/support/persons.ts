// The persons behind a test's principals (migration 0028): approvals count persons, and an
// approver or a submitter whose principal maps to no person is refused. The mapping is the
// owner's to write, so these run on the test's admin pool (a superuser), as an operator's owner
// connection would (README "Logins and persons").
import type pg from 'pg';

type Owner = Pick<pg.Pool, 'query'> | Pick<pg.Client, 'query'>;

export interface PrincipalRef {
  principal: string;
  kind: 'login' | 'token';
}

export const login = (principal: string): PrincipalRef => ({ principal, kind: 'login' });
export const token = (principal: string): PrincipalRef => ({ principal, kind: 'token' });

/** Map each principal to `person` (created if new); a principal mapped before is moved to it. */
export async function mapPerson(owner: Owner, person: string, ...principals: PrincipalRef[]): Promise<void> {
  await owner.query('INSERT INTO genfill.persons (person) VALUES ($1) ON CONFLICT DO NOTHING', [person]);
  for (const p of principals) {
    await owner.query(
      `INSERT INTO genfill.principal_persons (principal, kind, person) VALUES ($1, $2, $3)
       ON CONFLICT (principal, kind) DO UPDATE SET person = EXCLUDED.person`,
      [p.principal, p.kind, person],
    );
  }
}

/**
 * The test world's people: the admin login most tests submit as, and the two shared logins of
 * test/support/db.ts (genfill_alice, genfill_bob), each a person of their own.
 */
export async function mapTestLogins(owner: Owner): Promise<void> {
  const { rows } = await owner.query<{ admin: string }>('SELECT session_user::text AS admin');
  await mapPerson(owner, 'test-admin', login(rows[0]!.admin));
  await mapPerson(owner, 'alice', login('genfill_alice'));
  await mapPerson(owner, 'bob', login('genfill_bob'));
}
