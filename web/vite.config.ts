/// <reference types="vitest/config" />
import { defineConfig } from "vite";
import react from "@vitejs/plugin-react";

// Dev only: `npm run dev` proxies /api to a daemon's HTTP front. Until the daemon's cookie
// sign-in is in place, GPUPLANE_DEV_TOKEN (an API token) is added to proxied requests here,
// in the dev server, so it never reaches the browser. Production builds talk to the same
// origin that served them and carry no token.
const target = process.env.GPUPLANE_DEV_API ?? "http://127.0.0.1:8799";
const token = process.env.GPUPLANE_DEV_TOKEN;

export default defineConfig({
  plugins: [react()],
  build: {
    outDir: "dist",
    sourcemap: false,
    chunkSizeWarningLimit: 600,
  },
  server: {
    port: 5173,
    strictPort: true,
    proxy: {
      "/api": {
        target,
        changeOrigin: true,
        headers: token ? { Authorization: `Bearer ${token}` } : {},
      },
    },
  },
  test: {
    environment: "jsdom",
    include: ["src/**/*.test.{ts,tsx}"],
    setupFiles: ["src/test/setup.ts"],
    pool: "threads",
    maxWorkers: 2,
  },
});
