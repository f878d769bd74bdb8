// Who is calling. A bearer token from GENFILL_API_TOKENS (subject:role:token), or the session
// cookie a token login set in a browser. The token's subject is the principal every registry
// write of the request records — never the database login the API connects as.
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { NextFunction, Request, RequestHandler, Response } from 'express';
import { ConfigError, type ApiToken } from '@genfill/contracts';
import { ForbiddenError, UnauthenticatedError } from './http-errors.ts';

export type Role = ApiToken['role'];
export type Permission = 'read' | 'operate' | 'approve';

/**
 * Roles are not a ladder. Everyone reads; pause, resume and cancel are the operator's; the
 * approver's approval (a later issue) does not include operating a build, and an operator
 * cannot approve. Someone who does both holds two tokens.
 */
export const PERMISSIONS: Readonly<Record<Role, readonly Permission[]>> = {
  viewer: ['read'],
  operator: ['read', 'operate'],
  approver: ['read', 'approve'],
};

export interface Identity {
  subject: string;
  role: Role;
}

export interface Principal extends Identity {
  /** How this request proved it: an Authorization header or the login cookie. */
  by: 'bearer' | 'session';
}

export function can(who: Identity, permission: Permission): boolean {
  return PERMISSIONS[who.role].includes(permission);
}

const digest = (token: string) => createHash('sha256').update(token, 'utf8').digest();

/** The configured tokens, kept as digests and compared in constant time. */
export class TokenTable {
  readonly #entries: { digest: Buffer; identity: Identity }[];

  constructor(tokens: readonly ApiToken[]) {
    const seen = new Map<string, string>();
    for (const t of tokens) {
      const other = seen.get(t.token);
      if (other !== undefined) {
        // One token naming two subjects would make "who did it" a guess.
        throw new ConfigError([{ path: 'GENFILL_API_TOKENS', message: `the same token is given to ${other} and ${t.subject}: every token must be unique` }]);
      }
      seen.set(t.token, t.subject);
    }
    this.#entries = tokens.map((t) => ({ digest: digest(t.token), identity: { subject: t.subject, role: t.role } }));
  }

  get size(): number {
    return this.#entries.length;
  }

  verify(token: string): Identity | null {
    const d = digest(token);
    let found: Identity | null = null;
    // Compare with every entry, so the time taken does not say which one matched.
    for (const e of this.#entries) if (timingSafeEqual(e.digest, d)) found = e.identity;
    return found;
  }
}

export const SESSION_COOKIE = 'genfill_session';
const SESSION_TTL_MS = 8 * 3600_000;
/** GENFILL_API_SESSIONS_PER_SUBJECT's default. */
export const SESSIONS_PER_SUBJECT = 20;

interface Session extends Identity {
  expiresAt: number;
}

/**
 * Browser sessions: a random 256-bit id in the cookie, the identity kept here. Chosen over an
 * HMAC-signed cookie because there is no signing key to provision and rotate, the cookie
 * carries nothing about its holder, and logout really ends the session server-side. The cost:
 * sessions live in one API process — a restart or a second replica asks for the token again.
 *
 * Bounded per subject (issue 28): a subject's login past `maxPerSubject` ends that subject's
 * oldest session, never another subject's. (One bound for everyone, oldest out, let 10,000
 * logins of one viewer token log every operator out.) Only a valid token makes a session, so
 * the store holds at most maxPerSubject × the subjects of GENFILL_API_TOKENS.
 */
export class SessionStore {
  readonly #sessions = new Map<string, Session>();
  /** Each subject's session ids, oldest first. */
  readonly #bySubject = new Map<string, string[]>();
  readonly ttlMs: number;
  readonly maxPerSubject: number;

  constructor(o: { ttlMs?: number; maxPerSubject?: number } = {}) {
    this.ttlMs = o.ttlMs ?? SESSION_TTL_MS;
    this.maxPerSubject = o.maxPerSubject ?? SESSIONS_PER_SUBJECT;
  }

  /** Sessions held now (expired ones included until the next login sweeps them). */
  get size(): number {
    return this.#sessions.size;
  }

  create(identity: Identity): string {
    const now = Date.now();
    for (const [id, s] of this.#sessions) if (s.expiresAt <= now) this.destroy(id);
    const ids = this.#bySubject.get(identity.subject) ?? [];
    while (ids.length >= this.maxPerSubject) this.#sessions.delete(ids.shift()!);
    const id = randomBytes(32).toString('base64url');
    this.#sessions.set(id, { subject: identity.subject, role: identity.role, expiresAt: now + this.ttlMs });
    ids.push(id);
    this.#bySubject.set(identity.subject, ids);
    return id;
  }

  get(id: string): Identity | null {
    const s = this.#sessions.get(id);
    if (!s) return null;
    if (s.expiresAt <= Date.now()) {
      this.destroy(id);
      return null;
    }
    return { subject: s.subject, role: s.role };
  }

  destroy(id: string): void {
    const s = this.#sessions.get(id);
    if (!s) return;
    this.#sessions.delete(id);
    const ids = this.#bySubject.get(s.subject);
    const at = ids?.indexOf(id) ?? -1;
    if (at !== -1) ids!.splice(at, 1);
    if (ids?.length === 0) this.#bySubject.delete(s.subject);
  }
}

export function principalOf(res: Response): Principal | undefined {
  return res.locals.principal as Principal | undefined;
}

/** The caller's principal; 401 when the request carries no valid credentials. */
export function requirePrincipal(res: Response): Principal {
  const who = principalOf(res);
  if (!who) throw new UnauthenticatedError();
  return who;
}

/**
 * Sets res.locals.principal from `Authorization: Bearer …` or the session cookie. A request
 * that sends an Authorization header must be right about it: a bad token is 401 even when a
 * valid cookie comes along, so a script never silently acts as whoever is logged in.
 */
export function authenticate(tokens: TokenTable, sessions: SessionStore): RequestHandler {
  return (req: Request, res: Response, next: NextFunction) => {
    const header = req.get('authorization');
    if (header !== undefined) {
      const m = /^Bearer\s+(\S+)\s*$/i.exec(header);
      const identity = m ? tokens.verify(m[1]!) : null;
      if (!identity) throw new UnauthenticatedError('the bearer token is not one of GENFILL_API_TOKENS');
      res.locals.principal = { ...identity, by: 'bearer' } satisfies Principal;
      return next();
    }
    const sid = (req.cookies as Record<string, string> | undefined)?.[SESSION_COOKIE];
    const identity = sid ? sessions.get(sid) : null;
    if (identity) res.locals.principal = { ...identity, by: 'session' } satisfies Principal;
    next();
  };
}

const NEEDS: Record<Permission, string> = { read: 'any token', operate: 'an operator token', approve: 'an approver token' };

/** 401 without credentials, 403 when the role lacks the permission. */
export function requirePermission(permission: Permission): RequestHandler {
  return (_req, res, next) => {
    const who = requirePrincipal(res);
    if (!can(who, permission)) {
      throw new ForbiddenError(`${who.subject} has role ${who.role}, which cannot ${permission}: this needs ${NEEDS[permission]}`);
    }
    next();
  };
}
