// Builds the console into controlplane/web/console/, which the control plane's web port serves
// (GET / and /assets/<file>) and the Python distribution ships. The output is deterministic: the
// same sources and lock file give the same bytes (content-hashed names, no timestamps), so
// `scripts/build-console --check` can compare a fresh build with what is committed.
import { defineConfig } from "vite";

export default defineConfig({
  base: "/",
  esbuild: { jsx: "automatic", legalComments: "none" },
  build: {
    outDir: "../controlplane/web/console",
    emptyOutDir: true,
    assetsDir: "assets",
    sourcemap: false,
    target: "es2022",
    // The strict CSP allows no inline script: no preload polyfill, no inlined assets.
    modulePreload: { polyfill: false },
    assetsInlineLimit: 0,
    reportCompressedSize: false,
    chunkSizeWarningLimit: 1024,
  },
});
