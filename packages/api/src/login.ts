// A browser cannot send a bearer token to Bull Board, so it logs in once with the token:
// GET /login is a form, POST /login checks the token and sets an HttpOnly, SameSite=Strict
// session cookie, then redirects to the board (or back to the status page at /, when the form
// came from there). The cookie then works like the token. SameSite
// does not stop a sibling subdomain (same site, other origin), so the CSRF defence of the
// board's PUTs and the JSON verbs is the origin check of same-origin.ts.
//
// POST /login is rate-limited (rate-limit.ts): every attempt takes a token from its client
// address's bucket before the token is checked, and a valid login one from its subject's; an
// empty bucket is 429 with Retry-After (GENFILL_API_LOGIN_BURST, GENFILL_API_LOGIN_PER_MINUTE).
import express, { Router, type Response } from 'express';
import { z } from 'zod';
import type { Logger } from '@genfill/observability';
import { SESSION_COOKIE, type SessionStore, type TokenTable } from './auth.ts';
import { BOARD_PATH } from './board.ts';
import { type RateLimits, TokenBuckets } from './rate-limit.ts';

const loginForm = z.object({ token: z.string().trim().min(1).max(4096), next: z.string().optional() });

/** Where a login may lead: only these own pages, so the form is no open redirect. */
const AFTER_LOGIN = new Set(['/', BOARD_PATH]);
const nextOf = (value: unknown): string | null => (typeof value === 'string' && AFTER_LOGIN.has(value) ? value : null);

/** GENFILL_API_LOGIN_BURST and GENFILL_API_LOGIN_PER_MINUTE's defaults. */
export const LOGIN_LIMITS: RateLimits = { burst: 10, perMinute: 6 };

function page(res: Response, status: number, message: string | null, next: string | null): void {
  res
    .status(status)
    .type('html')
    .set('Cache-Control', 'no-store')
    // Inline styles only: the page loads nothing from anywhere.
    .set('Content-Security-Policy', "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'")
    .send(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>genfill — log in</title>
<style>body{font:16px system-ui,sans-serif;max-width:28rem;margin:4rem auto;padding:0 1rem}input{width:100%;padding:.5rem;margin:.5rem 0;box-sizing:border-box}p.error{color:#b00020}</style>
</head><body>
<h1>genfill</h1>
<p>Log in with your API token (from <code>GENFILL_API_TOKENS</code>) to open the status page and Bull Board.</p>
${message ? `<p class="error">${message}</p>` : ''}
<form method="post" action="/login">
${next ? `<input type="hidden" name="next" value="${next}">` : ''}
<label for="token">Token</label>
<input id="token" name="token" type="password" autocomplete="current-password" required autofocus>
<input type="submit" value="Log in">
</form>
</body></html>
`);
}

export function loginRoutes(deps: { tokens: TokenTable; sessions: SessionStore; log: Logger; limits?: RateLimits }): Router {
  const { tokens, sessions, log } = deps;
  const router = Router();
  const byAddress = new TokenBuckets(deps.limits ?? LOGIN_LIMITS);
  const bySubject = new TokenBuckets(deps.limits ?? LOGIN_LIMITS);
  const tooMany = (res: Response, wait: number, who: string, next: string | null) => {
    res.set('Retry-After', String(wait));
    page(res, 429, `Too many log-ins ${who}: try again in ${wait} s.`, next);
  };

  router.get('/login', (req, res) => page(res, 200, null, nextOf(req.query.next)));

  router.post('/login', express.urlencoded({ extended: false, limit: '8kb' }), (req, res) => {
    const address = req.ip ?? 'unknown';
    const addressWait = byAddress.take(address);
    if (addressWait > 0) {
      log.warn({ ip: address, retryAfter: addressWait }, 'login refused: too many from this address');
      return tooMany(res, addressWait, 'from this address', nextOf(req.body?.next));
    }
    const parsed = loginForm.safeParse(req.body ?? {});
    const identity = parsed.success ? tokens.verify(parsed.data.token) : null;
    if (!identity) {
      log.warn({ ip: req.ip }, 'login with an unknown token');
      return page(res, 401, 'That token is not one of this API’s tokens.', nextOf(req.body?.next));
    }
    const subjectWait = bySubject.take(identity.subject);
    if (subjectWait > 0) {
      log.warn({ ip: address, subject: identity.subject, retryAfter: subjectWait }, 'login refused: too many for this subject');
      return tooMany(res, subjectWait, 'for this token’s subject', nextOf(req.body?.next));
    }
    const sid = sessions.create(identity);
    res.cookie(SESSION_COOKIE, sid, {
      httpOnly: true,
      sameSite: 'strict',
      // Secure whenever the request came over TLS; behind a TLS proxy, that is
      // X-Forwarded-Proto: https from a proxy GENFILL_API_TRUST_PROXY trusts.
      secure: req.secure,
      path: '/',
      maxAge: sessions.ttlMs,
    });
    log.info({ subject: identity.subject, role: identity.role }, 'logged in');
    res.redirect(303, nextOf(parsed.data?.next) ?? BOARD_PATH);
  });

  const logout = (req: express.Request, res: Response) => {
    const sid = (req.cookies as Record<string, string> | undefined)?.[SESSION_COOKIE];
    if (sid) sessions.destroy(sid);
    res.clearCookie(SESSION_COOKIE, { path: '/' });
    res.redirect(303, '/login');
  };
  // Bull Board's header links are plain links (GET); logging out changes nothing but the session.
  router.get('/logout', logout);
  router.post('/logout', logout);
  return router;
}
