// Jest setup provided by Grafana scaffolding
import './.config/jest-setup';

// jsdom lacks these too; @grafana/ui components call them.
class NoopObserver {
  observe() {}
  unobserve() {}
  disconnect() {}
}
globalThis.ResizeObserver = globalThis.ResizeObserver ?? NoopObserver;
globalThis.IntersectionObserver = globalThis.IntersectionObserver ?? NoopObserver;
