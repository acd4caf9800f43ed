// Builds the console into the Python package (layers/dormant/dormant/_web/), which `dormant dev`
// serves at / and ships in the wheel: users of `pip install dormant` need no Node.js.
import { fileURLToPath } from "node:url";
import { defineConfig } from "vite";

// `npm run dev` serves the sources with hot reload, passing API calls to a running `dormant dev`.
const api = process.env.DORMANT_URL || "http://127.0.0.1:8000";

export default defineConfig({
  base: "/",
  server: { proxy: Object.fromEntries(["/sessions", "/turns", "/agui", "/docs"].map((path) => [path, api])) },
  oxc: { jsx: { runtime: "automatic", importSource: "preact" } },
  build: {
    outDir: fileURLToPath(new URL("../layers/dormant/dormant/_web", import.meta.url)),
    emptyOutDir: true,
    // No source maps in the wheel; the sources are in the repository.
    sourcemap: false,
    chunkSizeWarningLimit: 1024,
  },
});
