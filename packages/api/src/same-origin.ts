// The CSRF defence of the login cookie. SameSite=Strict alone is not enough: a sibling
// subdomain (a.example.com next to genfill.example.com) is the same *site*, so the browser
// sends the cookie with a form it posts, and an empty cross-origin POST could cancel a release.
// So a state-changing request authenticated by the cookie must also say it comes from this
// API's own pages: its `Origin` (or, when a browser leaves Origin out, its `Referer`) must be
// the origin the request reached — scheme://host[:port], read from X-Forwarded-Proto and
// X-Forwarded-Host only when GENFILL_API_TRUST_PROXY trusts the proxy that sent them.
// A browser always sends Origin on a cross-origin POST/PUT/PATCH/DELETE; one that sends
// neither header is refused too. Bearer requests are not checked: a browser never attaches
// an Authorization header to a cross-site request on its own.
// Proved by test/api-csrf.test.ts.
import type { Request, RequestHandler } from 'express';
import type { Logger } from '@genfill/observability';
import { principalOf } from './auth.ts';
import { ForbiddenError } from './http-errors.ts';

/** RFC 9110 safe methods: they change nothing, so they need no proof of origin. */
const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

/** The serialized origin of a URL, or null for anything that has none (`null`, garbage). */
function originOf(url: string): string | null {
  if (!URL.canParse(url)) return null;
  const origin = new URL(url).origin;
  return origin === 'null' ? null : origin;
}

/** scheme://host[:port] as this request reached the API (express honours `trust proxy`). */
export function ownOrigin(req: Request): string | null {
  const host = req.host;
  if (!host || !/^[A-Za-z0-9.\-[\]:]+$/.test(host) || (req.protocol !== 'http' && req.protocol !== 'https')) return null;
  return originOf(`${req.protocol}://${host}`);
}

const shown = (v: string) => JSON.stringify(v.length > 200 ? `${v.slice(0, 200)}…` : v);

export function requireSameOriginForCookies(log: Logger): RequestHandler {
  return (req, res, next) => {
    const who = principalOf(res);
    if (SAFE_METHODS.has(req.method) || who?.by !== 'session') return next();
    const own = ownOrigin(req);
    const origin = req.get('origin');
    const referer = req.get('referer');
    // Origin, when present, is the answer even if it is "null"; Referer only stands in for it.
    const [header, value] = origin !== undefined ? ['Origin', origin] : referer !== undefined ? ['Referer', referer] : [null, null];
    if (own !== null && value !== null && originOf(value) === own) return next();

    const what =
      header === null
        ? 'the request carries neither Origin nor Referer'
        : own === null
          ? `this API cannot tell its own origin from the request's Host header (${header} was ${shown(value!)})`
          : `${header} ${shown(value!)} is not this API's origin ${own}`;
    log.warn({ subject: who.subject, method: req.method, path: req.path, origin: origin ?? null, referer: referer ?? null, own }, 'refused a cookie request from another origin');
    throw new ForbiddenError(
      `refused: ${what}. A ${req.method} authenticated by the login cookie must come from this API's own pages, ` +
        'so another site cannot act with your session. Scripts send Authorization: Bearer <token> instead; ' +
        'behind a reverse proxy, have it pass Host (or X-Forwarded-Host) and X-Forwarded-Proto and set GENFILL_API_TRUST_PROXY.',
    );
  };
}
