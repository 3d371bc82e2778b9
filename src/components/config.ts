// Pure helpers for ConfigEditor: immutable updates of the datasource
// settings and the validation rules the Go backend applies.
import type { DataSourceSettings } from '@grafana/data';

import { BackendName, BackendSettings, FindingThresholds, SlurmOptions, SlurmSecureOptions } from '../types';

export type Settings = DataSourceSettings<SlurmOptions, SlurmSecureOptions>;
export type Ownership = NonNullable<SlurmOptions['jobOwnership']>;

/**
 * The backend's defaults for the settings shown here as placeholders: Go's
 * backends.DefaultTimeout (grafana-plugin/pkg/query/backends/http.go),
 * query.DefaultMaxQueryLength, DefaultParallel and DefaultMaxCalls
 * (grafana-plugin/pkg/query/engine.go) and findings.Defaults()
 * (grafana-plugin/pkg/query/findings/findings.go). The keys are jsonData's.
 * TestFrontEndDefaults (grafana-plugin/pkg/plugin/defaults_test.go) reads
 * this literal and fails when it and Go's differ.
 */
export const BACKEND_DEFAULTS = {
  timeoutSeconds: 30,
  pyroscopeMaxQueryLength: '24h',
  maxConcurrentCalls: 8,
  maxCallsPerQuery: 1024,
  findings: {
    cpuEfficiencyBelow: 0.5,
    memoryUsedBelow: 0.25,
    memoryUsedAbove: 0.9,
    gpuIdleBelow: 0.01,
    gpuMemoryUsedBelow: 0.2,
    gpuUtilizationBelow: 0.3,
    cpuSaturatedAbove: 0.9,
    stragglerAbove: 1.5,
  },
} as const;

export const DEFAULT_TIMEOUT_SECONDS = BACKEND_DEFAULTS.timeoutSeconds;

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
 * Parses a whole-number field (the timeout, the call limits): '' means "use
 * the default" (undefined), a whole number > 0 is kept, anything else is
 * null (invalid).
 */
export function parsePositiveInt(text: string): number | undefined | null {
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

// Prometheus' model.ParseDuration units, largest first, in milliseconds.
const durationUnits: Record<string, { pos: number; ms: number }> = {
  y: { pos: 1, ms: 365 * 24 * 3600e3 },
  w: { pos: 2, ms: 7 * 24 * 3600e3 },
  d: { pos: 3, ms: 24 * 3600e3 },
  h: { pos: 4, ms: 3600e3 },
  m: { pos: 5, ms: 60e3 },
  s: { pos: 6, ms: 1e3 },
  ms: { pos: 7, ms: 1 },
};

// The largest time.Duration, 2^63-1 ns, in whole milliseconds.
const maxDurationMs = 9223372036854;

/**
 * Milliseconds of a duration as Prometheus' model.ParseDuration (the Go
 * side's json.Unmarshal of model.Duration) reads it: digits and a unit,
 * repeated, units from y w d h m s ms each at most once and largest first,
 * "0" alone; null for what it refuses. No sign, no fraction, no spaces.
 */
export function parseDurationMs(s: string): number | null {
  if (s === '0') {
    return 0;
  }
  let rest = s;
  let total = 0;
  let lastPos = 0;
  while (rest !== '') {
    const m = /^([0-9]+)([^0-9]+)/.exec(rest);
    const unit = m ? durationUnits[m[2]] : undefined;
    if (!m || !unit || unit.pos <= lastPos) {
      return null;
    }
    lastPos = unit.pos;
    // Number is exact for every sum in range; past it only "too big" matters.
    total += Number(m[1]) * unit.ms;
    if (total > maxDurationMs) {
      return null;
    }
    rest = rest.slice(m[0].length);
  }
  return s === '' ? null : total;
}

/**
 * Parses the max query length field: '' is unset (undefined), a duration
 * of at least 1s (settings.go refuses less) is kept trimmed, else null.
 */
export function parseMaxQueryLength(text: string): string | undefined | null {
  const s = text.trim();
  if (s === '') {
    return undefined;
  }
  const ms = parseDurationMs(s);
  return ms !== null && ms >= 1000 ? s : null;
}

export type ThresholdKey = keyof FindingThresholds;

/**
 * Parses a threshold typed as a percentage: '' is unset (undefined), a
 * decimal above 0 and at most 100 becomes the ratio jsonData holds
 * (12.5 -> 0.125), else null.
 */
export function parsePercent(text: string): number | undefined | null {
  const s = text.trim();
  if (s === '') {
    return undefined;
  }
  if (!/^([0-9]+\.?[0-9]*|\.[0-9]+)$/.test(s)) {
    return null;
  }
  // toPrecision: 29 / 100 is 0.29, not 0.29000000000000004.
  const r = Number((Number(s) / 100).toPrecision(15));
  return r > 0 && r <= 1 ? r : null;
}

/** A stored ratio as the percentage the field shows (0.29 -> "29"); '' when unset. */
export function percentText(ratio: number | undefined): string {
  return ratio === undefined ? '' : String(Number((ratio * 100).toPrecision(15)));
}

/** The largest stragglerAbove the backend takes (Go: findings.MaxStragglerAbove). */
export const MAX_STRAGGLER_ABOVE = 100;

/**
 * Whether a threshold is typed as it is stored, a ratio over 1 (1.5 for
 * 1.5× the median), rather than as a percentage: stragglerAbove compares a
 * rank's time with the median rank's, not a share with its whole.
 */
export function isRatioThreshold(key: ThresholdKey): boolean {
  return key === 'stragglerAbove';
}

/**
 * Parses a threshold typed as a ratio: '' is unset (undefined), a decimal
 * above 1 and at most MAX_STRAGGLER_ABOVE is kept, else null.
 */
export function parseRatio(text: string): number | undefined | null {
  const s = text.trim();
  if (s === '') {
    return undefined;
  }
  if (!/^([0-9]+\.?[0-9]*|\.[0-9]+)$/.test(s)) {
    return null;
  }
  const r = Number(s);
  return r > 1 && r <= MAX_STRAGGLER_ABOVE ? r : null;
}

/** Parses a threshold field as its key is typed (a percentage or a ratio). */
export function parseThreshold(key: ThresholdKey, text: string): number | undefined | null {
  return isRatioThreshold(key) ? parseRatio(text) : parsePercent(text);
}

/** A stored threshold as its field shows it; '' when unset. */
export function thresholdText(key: ThresholdKey, value: number | undefined): string {
  if (!isRatioThreshold(key)) {
    return percentText(value);
  }
  return value === undefined ? '' : String(value);
}

/**
 * The message under each threshold field that the backend would refuse
 * (findings.Thresholds.Validate after WithDefaults): each a share in
 * (0, 1] but stragglerAbove, a ratio in (1, 100], and memoryUsedBelow
 * under memoryUsedAbove, an unset one taking its default.
 */
export function thresholdErrors(texts: Partial<Record<ThresholdKey, string>>): Partial<Record<ThresholdKey, string>> {
  const errors: Partial<Record<ThresholdKey, string>> = {};
  const value = (k: ThresholdKey) => parseThreshold(k, texts[k] ?? '');
  for (const k of Object.keys(texts) as ThresholdKey[]) {
    if (value(k) === null) {
      errors[k] = isRatioThreshold(k)
        ? `Must be a ratio above 1 and at most ${MAX_STRAGGLER_ABOVE}`
        : 'Must be a percentage above 0 and at most 100';
    }
  }
  const below = value('memoryUsedBelow');
  const above = value('memoryUsedAbove');
  if (below !== null && above !== null) {
    const b = below ?? BACKEND_DEFAULTS.findings.memoryUsedBelow;
    const a = above ?? BACKEND_DEFAULTS.findings.memoryUsedAbove;
    if (b >= a) {
      errors.memoryUsedBelow = `Must be under "memory used above" (${percentText(a)}%)`;
      errors.memoryUsedAbove = `Must be over "memory used below" (${percentText(b)}%)`;
    }
  }
  return errors;
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

export type LimitKey = 'pyroscopeMaxQueryLength' | 'maxConcurrentCalls' | 'maxCallsPerQuery';

/** Sets a query limit, or removes its key (the backend's default) when undefined. */
export function setLimit<K extends LimitKey>(options: Settings, key: K, value: SlurmOptions[K] | undefined): Settings {
  const jsonData = { ...options.jsonData };
  if (value === undefined) {
    delete jsonData[key];
  } else {
    jsonData[key] = value;
  }
  return { ...options, jsonData };
}

/**
 * Sets one finding threshold (a ratio), or removes its key when undefined,
 * and findings itself when no threshold is left.
 */
export function setThreshold(options: Settings, key: ThresholdKey, value: number | undefined): Settings {
  const findings = { ...options.jsonData.findings };
  if (value === undefined) {
    delete findings[key];
  } else {
    findings[key] = value;
  }
  const jsonData: SlurmOptions = { ...options.jsonData, findings };
  if (Object.keys(findings).length === 0) {
    delete jsonData.findings;
  }
  return { ...options, jsonData };
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
