// Pure helpers for ConfigEditor: immutable updates of the datasource
// settings and the validation rules the Go backend applies.
import type { DataSourceSettings } from '@grafana/data';

import { BackendName, BackendSettings, SlurmOptions, SlurmSecureOptions } from '../types';

export type Settings = DataSourceSettings<SlurmOptions, SlurmSecureOptions>;
export type Ownership = NonNullable<SlurmOptions['jobOwnership']>;

export const DEFAULT_TIMEOUT_SECONDS = 30;

/** True for an absolute http:// or https:// URL with a host (as backends/http.go checks). */
export function isHttpUrl(s: string): boolean {
  let u: URL;
  try {
    u = new URL(s.trim());
  } catch {
    return false;
  }
  return (u.protocol === 'http:' || u.protocol === 'https:') && u.host !== '';
}

/** The message to show under a backend URL, or undefined when it is fine. */
export function urlError(url: string | undefined, required: boolean): string | undefined {
  const s = (url ?? '').trim();
  if (s === '') {
    return required ? 'A URL is required' : undefined;
  }
  return isHttpUrl(s) ? undefined : 'Must be an http:// or https:// URL, e.g. http://pyroscope:4040';
}

/**
 * Parses the timeout field: '' means "use the default" (undefined), a whole
 * number > 0 is kept, anything else is null (invalid).
 */
export function parseTimeout(text: string): number | undefined | null {
  const s = text.trim();
  if (s === '') {
    return undefined;
  }
  if (!/^\d+$/.test(s)) {
    return null;
  }
  const n = Number(s);
  return Number.isSafeInteger(n) && n > 0 ? n : null;
}

/** Trims, drops empty entries and duplicates, keeping first-seen order. */
export function normalizeList(items: readonly string[]): string[] {
  const out: string[] = [];
  for (const raw of items) {
    const s = raw.trim();
    if (s !== '' && !out.includes(s)) {
      out.push(s);
    }
  }
  return out;
}

export function setJsonData(options: Settings, patch: Partial<SlurmOptions>): Settings {
  return { ...options, jsonData: { ...options.jsonData, ...patch } };
}

export function setBackend(options: Settings, backend: BackendName, patch: Partial<BackendSettings>): Settings {
  return setJsonData(options, { [backend]: { ...options.jsonData[backend], ...patch } });
}

export function setOwnership(options: Settings, patch: Partial<Ownership>): Settings {
  return setJsonData(options, { jobOwnership: { ...options.jsonData.jobOwnership, ...patch } });
}

/** Sets a new secret value; Grafana encrypts secureJsonData on save and never sends it back. */
export function setSecret(options: Settings, name: string, value: string): Settings {
  return { ...options, secureJsonData: { ...options.secureJsonData, [name]: value } };
}

/** The standard Grafana reset: forget "configured" and send an empty value, which clears it on save. */
export function resetSecret(options: Settings, name: string): Settings {
  return {
    ...options,
    secureJsonFields: { ...options.secureJsonFields, [name]: false },
    secureJsonData: { ...options.secureJsonData, [name]: '' },
  };
}
