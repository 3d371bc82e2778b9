import { DependencyList, useEffect, useState } from 'react';

/**
 * useLoaded runs load when deps change and returns what it resolved to: []
 * until then, and [] again if it fails (an editor still works without its
 * suggestions). An answer that arrives after deps changed, or after the
 * component went away, is dropped.
 */
export function useLoaded<T>(load: () => Promise<T[]>, deps: DependencyList): T[] {
  const [items, setItems] = useState<T[]>([]);
  useEffect(() => {
    let live = true;
    load().then(
      (v) => live && setItems(v),
      () => live && setItems([])
    );
    return () => {
      live = false;
    };
    // The caller names what load depends on.
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, deps);
  return items;
}
