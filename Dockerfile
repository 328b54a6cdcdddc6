# svc-serving container image: one image for every process (router, controller, fleet,
# dashboard, engine sim, up); the command picks which one (ENTRYPOINT is `svc-serving`).
#   docker build -t svc-serving .
#   docker run --rm svc-serving --version
# The runtime stage installs the packed npm package exactly as test/package/image-install.test.ts
# does (decision 0066): the tarball that `npm pack` makes, its dependencies pinned by
# package-lock.json, devDependencies left out, better-sqlite3 compiled here against this image's
# Node (never a prebuilt binary from the internet).
ARG NODE_VERSION=24

# Node and the toolchain node-gyp needs for better-sqlite3.
FROM node:${NODE_VERSION}-bookworm-slim AS toolchain
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 make g++ \
 && rm -rf /var/lib/apt/lists/*

# Build: every dependency (TypeScript is a devDependency), then `npm pack`, whose prepack
# compiles src/ into dist/. No install script is needed to compile TypeScript.
FROM toolchain AS build
WORKDIR /src
COPY package.json package-lock.json ./
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY . .
RUN npm pack --pack-destination /tmp \
 && mkdir -p /opt/svc-serving \
 && tar -xzf /tmp/svc-serving-*.tgz -C /opt/svc-serving --strip-components=1 \
 && cp package-lock.json /opt/svc-serving/

# Production install: the packed files plus the lockfile, `npm ci --omit=dev`. package.json's
# allowScripts lets better-sqlite3's install script run (the other two it names are
# devDependencies, not installed here); build_from_source makes it compile instead of
# downloading a binary.
FROM toolchain AS install
WORKDIR /opt/svc-serving
COPY --from=build /opt/svc-serving ./
RUN npm_config_build_from_source=true npm ci --omit=dev --strict-allow-scripts --no-audit --no-fund \
 && rm -rf /root/.npm /root/.cache \
 && node -e "new (require('better-sqlite3'))(':memory:').close()"

# Runtime: no compiler, no npm cache, a user of its own, state under /state.
FROM node:${NODE_VERSION}-bookworm-slim AS runtime
ENV NODE_ENV=production \
    SVC_SERVING_HOME=/state \
    SVC_HEALTHCHECK_URL=http://127.0.0.1:8000/healthz \
    PATH=/opt/svc-serving/bin:$PATH
RUN groupadd --system --gid 10001 svc \
 && useradd --system --uid 10001 --gid svc --home-dir /state --no-create-home --shell /usr/sbin/nologin svc \
 && mkdir -p /state /opt/svc-serving/bin \
 && chown svc:svc /state
COPY --from=install /opt/svc-serving /opt/svc-serving
RUN ln -s /opt/svc-serving/dist/cli/main.js /opt/svc-serving/bin/svc-serving \
 && chmod 0755 /opt/svc-serving/dist/cli/main.js \
 && svc-serving --version
USER svc:svc
WORKDIR /state
VOLUME ["/state"]
EXPOSE 8000 8100 8200 8300
# Liveness of whichever server this container runs: set SVC_HEALTHCHECK_URL to its /healthz
# (router 8000, controller 8100, dashboard 8200, fleet 8300; the engine sim's is /health).
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
  CMD ["node", "-e", "fetch(process.env.SVC_HEALTHCHECK_URL, { signal: AbortSignal.timeout(2500) }).then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
ENTRYPOINT ["svc-serving"]
CMD ["--help"]
