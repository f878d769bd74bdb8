# syntax=docker/dockerfile:1
# One image for every genfill service: the command picks the service
#   docker run … genfill:0.1.0 worker|planner|reconciler|projector|api
# and any other verb (`migrate`, `status --json`, `deploy render …`) runs the same way.
#
# No build step: the sources are TypeScript run through tsx's loader (apps/cli/bin/genfill.js),
# so the image holds the sources and the production dependencies, nothing else. It runs as the
# unprivileged `node` user (uid 1000) under tini, which forwards SIGTERM to node and reaps
# children, and it needs no writable path: tsx's transform cache is kept in memory
# (TSX_DISABLE_CACHE) and every service keeps its state in the registry, so the Deployments
# in deploy/ run it with a read-only root filesystem.

ARG NODE_IMAGE=node:20.20-bookworm-slim

# Only the package manifests, so the dependency layer is rebuilt when they change, not when a
# source file does.
FROM ${NODE_IMAGE} AS manifests
WORKDIR /src
COPY package.json package-lock.json ./
COPY apps ./apps
COPY packages ./packages
RUN find apps packages -mindepth 2 -maxdepth 2 ! -name package.json -exec rm -rf {} +

FROM ${NODE_IMAGE} AS deps
WORKDIR /app
COPY --from=manifests /src ./
# Production dependencies only; the workspaces become links in node_modules/@genfill.
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force

FROM ${NODE_IMAGE} AS runtime
RUN apt-get update \
 && apt-get install -y --no-install-recommends tini \
 && rm -rf /var/lib/apt/lists/*
ENV NODE_ENV=production \
    TSX_DISABLE_CACHE=1 \
    GENFILL_METRICS_PORT=9464
WORKDIR /app
# Owned by root, readable by everyone: the service cannot change its own code.
COPY --from=deps /app/node_modules ./node_modules
COPY package.json package-lock.json tsconfig.base.json tsconfig.json ./
COPY apps ./apps
COPY packages ./packages
COPY examples ./examples
USER node
EXPOSE 3000 9464
ENTRYPOINT ["/usr/bin/tini", "--", "node", "apps/cli/bin/genfill.js"]
CMD ["--help"]
