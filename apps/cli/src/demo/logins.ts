// The demo's logins (issue 28; SPEC "Identity and roles"): genfill's services run as plain
// logins of their role — never a superuser, never the owner — and approvals count persons. The
// demo makes the same logins an operator makes (README "Logins and persons"), idempotently,
// on its one owner connection (the URL `genfill demo` was given), which it also uses for what
// needs the owner: migrate, seeding the application's tables, adopt with capture install.
//   fleet      genfill_service  planner, workers, projector, reconciler, catch-up, cutover
//   api        genfill_api      the API service
//   operator   genfill_operator submits the release (person demo-olive)
//   approver   genfill_approver approves it (person demo-ada)
//   approver2  genfill_approver a second approver, another person (demo-bea)
import { RefusedError } from '@genfill/contracts';
import { createPool, type Db } from '@genfill/registry';
import type { Config } from '@genfill/contracts';

export interface DemoLogin {
  login: string;
  role: 'genfill_service' | 'genfill_api' | 'genfill_operator' | 'genfill_approver';
  /** The person an approval or a submission by this login counts as. */
  person?: string;
}

export const DEMO_LOGINS = {
  fleet: { login: 'genfill_demo_fleet', role: 'genfill_service' },
  api: { login: 'genfill_demo_api', role: 'genfill_api' },
  operator: { login: 'genfill_demo_operator', role: 'genfill_operator', person: 'demo-olive' },
  approver: { login: 'genfill_demo_approver', role: 'genfill_approver', person: 'demo-ada' },
  approver2: { login: 'genfill_demo_approver2', role: 'genfill_approver', person: 'demo-bea' },
} as const satisfies Record<string, DemoLogin>;
export type DemoRole = keyof typeof DEMO_LOGINS;

/** The demo's connection string with another login (no password: the demo's server trusts local logins). */
export function urlOf(config: Config, who: DemoRole): string {
  const url = new URL(config.DATABASE_URL);
  url.username = DEMO_LOGINS[who].login;
  url.password = '';
  return url.toString();
}

/**
 * Creates the logins (CREATE ROLE … LOGIN, GRANT <role>: needs CREATEROLE, as a superuser
 * has), maps the people among them to persons (without changing a mapping the owner made),
 * and grants the fleet and the operator SELECT on the application's tables the release reads.
 * Safe to run again.
 */
export async function ensureDemoLogins(owner: Db): Promise<void> {
  for (const { login, role } of Object.values(DEMO_LOGINS)) {
    await owner.query(`DO $$ BEGIN CREATE ROLE ${login} LOGIN; EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$`);
    await owner.query(`GRANT ${role} TO ${login}`);
  }
  for (const l of Object.values(DEMO_LOGINS) as DemoLogin[]) {
    if (!l.person) continue;
    await owner.query('INSERT INTO genfill.persons (person, note) VALUES ($1, $2) ON CONFLICT DO NOTHING', [l.person, 'made by genfill demo']);
    await owner.query(`INSERT INTO genfill.principal_persons (principal, kind, person) VALUES ($1, 'login', $2) ON CONFLICT DO NOTHING`, [l.login, l.person]);
  }
  // The release reads public.orders and public.tax_rates: the fleet builds from them and the
  // operator's submit probes the transform against them.
  await owner.query(`GRANT USAGE ON SCHEMA public TO genfill_service, genfill_operator;
    GRANT SELECT ON public.orders, public.tax_rates TO genfill_service, genfill_operator`);
}

/** A pool as one of the demo's logins; a refused login names what to allow. */
export async function demoPool(config: Config, who: DemoRole, max = 2, opts: { fleet?: boolean } = {}): Promise<Db> {
  const { login } = DEMO_LOGINS[who];
  const pool = createPool({ ...config, DATABASE_URL: urlOf(config, who) }, `genfill-demo-${who}`, max, opts);
  try {
    await pool.query('SELECT 1');
  } catch (err) {
    await pool.end();
    const code = (err as { code?: string }).code;
    if (code === '28000' || code === '28P01') {
      throw new RefusedError(
        `the demo could not log in as ${login} (${(err as Error).message}): it runs genfill's services as plain logins, never a superuser; ` +
          `allow local logins for ${login} in pg_hba.conf (trust, as a development server has), or run the steps yourself as the README's "Logins and persons" shows`,
      );
    }
    throw err;
  }
  return pool;
}
