// Every kind of request — a person's ask that a service runs for them (README "Roles") —
// declared once: its name, the service that runs it, its arguments and what it does. The
// arguments are strict and bounded: a request's JSON is untrusted in every process that reads
// it, so the CLI and the API parse it before submitting, and the serving loop parses it again
// before a handler sees it (a payload that does not parse fails the request with exit 2, nothing
// done). The CLI's service map, the API's bodies, the handler maps (a service's map must have a
// handler for each of its kinds) and the database's list of kinds (genfill.request_kinds,
// synced by `genfill migrate`) all derive from REQUEST_KINDS. So does the JSON Schema of each
// kind's arguments that migrate stores beside it (requestArgsSchema): genfill.request checks
// the arguments against it before anything is queued, whoever calls it (psql included).
import { z } from 'zod';
import { InvalidInputError, type Problem } from './errors.ts';

export const REQUEST_SERVICES = ['planner', 'projector', 'reconciler'] as const;
export type RequestService = (typeof REQUEST_SERVICES)[number];

/** A reason recorded with the change. */
const reason = z.string({ error: 'give a reason (it is recorded)' }).trim().min(1, 'give a reason (it is recorded)').max(1000);
/** The freeze bound of a cutover or rollback: up to 10 minutes. */
const maxFreezeMs = z.number().int().positive().max(600_000);

interface KindSpec<S extends RequestService, A extends z.ZodObject> {
  service: S;
  args: A;
  description: string;
}

const kind = <S extends RequestService, A extends z.ZodObject>(k: KindSpec<S, A>): KindSpec<S, A> => k;

export const REQUEST_KINDS = {
  plan: kind({
    service: 'planner',
    args: z.strictObject({}),
    description: 'write the manifest of a release and enqueue its partitions (genfill plan)',
  }),
  repair: kind({
    service: 'planner',
    args: z.strictObject({
      partitions: z.array(z.string().min(1).max(200)).max(100_000),
      reason: reason.optional(),
    }),
    description: 'rebuild the named partitions of a RECONCILIATION_REQUIRED release (genfill repair)',
  }),
  reconcile: kind({
    service: 'reconciler',
    args: z.strictObject({ incremental: z.boolean().optional() }),
    description: 'reconcile a built release, or re-check the keys changed since its latest reconciliation (genfill reconcile)',
  }),
  seal: kind({
    service: 'projector',
    // The projector is waited for at most 30 minutes, as long as the CLI waits for a request.
    args: z.strictObject({ waitMs: z.number().int().positive().max(1_800_000).optional() }),
    description: "seal ingress of the release's dataset at a barrier that contains every build watermark (genfill seal)",
  }),
  unseal: kind({
    service: 'projector',
    args: z.strictObject({ reason }),
    description: 'reopen ingress under a new epoch (genfill unseal)',
  }),
  catchup: kind({
    service: 'projector',
    args: z.strictObject({}),
    description: "one catch-up round of the release's candidate (genfill catchup)",
  }),
  cutover: kind({
    service: 'projector',
    args: z.strictObject({ dryRun: z.boolean().optional(), maxFreezeMs: maxFreezeMs.optional() }),
    description: "switch every reader of the dataset to the release's generation, or only check that it could (genfill cutover)",
  }),
  rollback: kind({
    service: 'projector',
    args: z.strictObject({ maxFreezeMs: maxFreezeMs.optional() }),
    description: 'switch every reader back to the generation the release replaced (genfill rollback)',
  }),
} as const;

export type RequestKind = keyof typeof REQUEST_KINDS;
export type RequestArgs<K extends RequestKind> = z.infer<(typeof REQUEST_KINDS)[K]['args']>;
/** The kinds `S` runs. */
export type KindsOf<S extends RequestService> = { [K in RequestKind]: (typeof REQUEST_KINDS)[K]['service'] extends S ? K : never }[RequestKind];

export const REQUEST_KIND_NAMES = Object.keys(REQUEST_KINDS) as RequestKind[];

export function isRequestKind(name: string): name is RequestKind {
  return Object.hasOwn(REQUEST_KINDS, name);
}

export function serviceOf(kind: RequestKind): RequestService {
  return REQUEST_KINDS[kind].service;
}

/**
 * The arguments of a `kind` request, parsed: InvalidInputError naming each problem under
 * `where` (`args`, `body`) otherwise.
 */
export function parseRequestArgs<K extends RequestKind>(kind: K, args: unknown, where = 'args'): RequestArgs<K> {
  const parsed = REQUEST_KINDS[kind].args.safeParse(args);
  if (parsed.success) return parsed.data as RequestArgs<K>;
  const problems: Problem[] = parsed.error.issues.map((i) => ({ path: [where, ...i.path.map(String)].join('.'), message: i.message }));
  throw new InvalidInputError(problems);
}

/**
 * The keywords genfill.request_args_problems (sql/functions/request.sql) checks, by the type
 * they apply to. A schema using any other keyword is refused here, so the database never
 * silently skips a constraint the code's schema has.
 */
const CHECKED_KEYWORDS: Record<string, readonly string[]> = {
  object: ['type', 'properties', 'required', 'additionalProperties'],
  array: ['type', 'items', 'minItems', 'maxItems'],
  string: ['type', 'minLength', 'maxLength'],
  integer: ['type', 'minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum'],
  number: ['type', 'minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum'],
  boolean: ['type'],
};

type JsonSchema = { [k: string]: unknown };

function assertChecked(schema: JsonSchema, path: string): void {
  const type = schema.type;
  const allowed = typeof type === 'string' ? CHECKED_KEYWORDS[type] : undefined;
  if (!allowed) throw new Error(`request args schema at ${path}: type ${JSON.stringify(type)} is not one genfill.request checks`);
  const extra = Object.keys(schema).filter((k) => !allowed.includes(k));
  if (extra.length > 0) throw new Error(`request args schema at ${path}: genfill.request does not check ${extra.join(', ')}`);
  if (type === 'object') {
    if (schema.additionalProperties !== false) throw new Error(`request args schema at ${path}: an object must be strict (additionalProperties false)`);
    for (const [k, sub] of Object.entries((schema.properties ?? {}) as Record<string, JsonSchema>)) assertChecked(sub, `${path}.${k}`);
  }
  if (type === 'array' && schema.items !== undefined) assertChecked(schema.items as JsonSchema, `${path}[]`);
}

/**
 * The JSON Schema of a kind's arguments (draft 2020-12, as z.toJSONSchema writes it for the
 * input), limited to what the database checks: throws when the kind's schema needs more.
 */
export function requestArgsSchema(kind: RequestKind): JsonSchema {
  const { $schema: _drop, ...schema } = z.toJSONSchema(REQUEST_KINDS[kind].args, { io: 'input' }) as JsonSchema;
  assertChecked(schema, kind);
  return schema;
}
