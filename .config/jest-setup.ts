import '@testing-library/jest-dom';

// jsdom lacks these; @grafana/ui components call them.
Object.defineProperty(window, 'matchMedia', {
  writable: true,
  value: (query: string) => ({
    matches: false,
    media: query,
    onchange: null,
    addListener: () => {},
    removeListener: () => {},
    addEventListener: () => {},
    removeEventListener: () => {},
    dispatchEvent: () => false,
  }),
});
class NoopObserver {
  observe() {}
  unobserve() {}
  disconnect() {}
}
(globalThis as any).ResizeObserver = (globalThis as any).ResizeObserver ?? NoopObserver;
(globalThis as any).IntersectionObserver = (globalThis as any).IntersectionObserver ?? NoopObserver;
