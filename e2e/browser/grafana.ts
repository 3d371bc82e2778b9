// Stand-ins for the services Grafana's front end gives a plugin through
// @grafana/runtime's singletons: a BackendSrv on window.fetch, a TemplateSrv
// with a few dashboard variables, and a DataSourceSrv that knows the one
// datasource instance of the page. They do what Grafana's do for the calls
// the plugin makes; anything else throws, so that a new dependency shows.
import {
  DataQuery,
  DataSourceApi,
  DataSourceInstanceSettings,
  DataSourceJsonData,
  DataSourceRef,
  ScopedVars,
  TimeRange,
  TypedVariableModel,
} from '@grafana/data';
import {
  BackendSrv,
  BackendSrvRequest,
  DataSourceSrv,
  FetchError,
  FetchResponse,
  RuntimeDataSource,
  setBackendSrv,
  setDataSourceSrv,
  setTemplateSrv,
  TemplateSrv,
} from '@grafana/runtime';
// Grafana core's own start-up calls; a plugin would not make them.
import { initializeLoggersRegistry, registerRuntimeDataSourceInstance } from '@grafana/runtime/unstable';
import { lastValueFrom, Observable } from 'rxjs';

// ---------------------------------------------------------------- BackendSrv

/** Every request the page made, for the test to read (window.__harness.requests). */
export interface RequestLogEntry {
  method: string;
  url: string;
  status: number;
  ms: number;
}
export const requestLog: RequestLogEntry[] = [];

function buildURL(url: string, params?: Record<string, unknown>): string {
  if (!params) {
    return url;
  }
  const sp = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v === undefined || v === null) {
      continue;
    }
    for (const one of Array.isArray(v) ? v : [v]) {
      sp.append(k, String(one));
    }
  }
  const qs = sp.toString();
  if (!qs) {
    return url;
  }
  return url + (url.includes('?') ? '&' : '?') + qs;
}

function requestBody(options: BackendSrvRequest, headers: Headers): BodyInit | undefined {
  const d = options.data;
  if (d === undefined || d === null || options.method === 'GET' || options.method === undefined) {
    return undefined;
  }
  if (typeof d === 'string' || d instanceof FormData || d instanceof Blob || d instanceof ArrayBuffer || d instanceof URLSearchParams) {
    return d;
  }
  if (!headers.has('Content-Type')) {
    headers.set('Content-Type', 'application/json');
  }
  return JSON.stringify(d);
}

async function readBody(res: Response, options: BackendSrvRequest): Promise<unknown> {
  switch (options.responseType) {
    case 'text':
      return res.text();
    case 'arraybuffer':
      return res.arrayBuffer();
    case 'blob':
      return res.blob();
  }
  const text = await res.text();
  if (!text) {
    return undefined;
  }
  try {
    return JSON.parse(text);
  } catch {
    // Grafana's backendSrv gives up on JSON the same way: the text it is.
    return text;
  }
}

/**
 * HarnessBackendSrv is Grafana's BackendSrv on window.fetch: fetch() is an
 * Observable of one FetchResponse; a non-2xx answer is a FetchError with
 * the parsed body in data; a newer request with the same requestId cancels
 * the older one, and unsubscribing aborts the request.
 */
export class HarnessBackendSrv implements BackendSrv {
  private inFlight = new Map<string, AbortController>();

  fetch<T>(options: BackendSrvRequest): Observable<FetchResponse<T>> {
    return new Observable<FetchResponse<T>>((sub) => {
      const ac = new AbortController();
      if (options.requestId) {
        this.inFlight.get(options.requestId)?.abort();
        this.inFlight.set(options.requestId, ac);
      }
      options.abortSignal?.addEventListener('abort', () => ac.abort());
      const headers = new Headers();
      for (const [k, v] of Object.entries(options.headers ?? {})) {
        if (v !== undefined && v !== null) {
          headers.set(k, String(v));
        }
      }
      if (!headers.has('Accept')) {
        headers.set('Accept', 'application/json, text/plain, */*');
      }
      const method = (options.method ?? 'GET').toUpperCase();
      const url = buildURL(options.url, options.params);
      const body = requestBody({ ...options, method }, headers);
      const started = performance.now();
      let done = false;
      fetch(url, { method, headers, body, signal: ac.signal, credentials: options.credentials ?? 'same-origin' })
        .then(async (res) => {
          const data = (await readBody(res, options)) as T;
          requestLog.push({ method, url, status: res.status, ms: Math.round(performance.now() - started) });
          const response: FetchResponse<T> = {
            data,
            status: res.status,
            statusText: res.statusText,
            ok: res.ok,
            headers: res.headers,
            redirected: res.redirected,
            type: res.type,
            url: res.url,
            config: options,
          };
          done = true;
          if (res.ok) {
            sub.next(response);
            sub.complete();
            return;
          }
          const message =
            data && typeof data === 'object' && 'message' in data && typeof data.message === 'string'
              ? data.message
              : `${res.status} ${res.statusText}`;
          const err: FetchError<T> = { status: res.status, statusText: res.statusText, data, message, config: options };
          sub.error(err);
        })
        .catch((e: unknown) => {
          done = true;
          if (ac.signal.aborted) {
            const err: FetchError = { status: -1, statusText: 'Request was aborted', data: {}, cancelled: true, config: options };
            sub.error(err);
            return;
          }
          const err: FetchError = { status: 0, statusText: String(e), data: { message: String(e) }, message: String(e), config: options };
          sub.error(err);
        })
        .finally(() => {
          if (options.requestId && this.inFlight.get(options.requestId) === ac) {
            this.inFlight.delete(options.requestId);
          }
        });
      return () => {
        if (!done) {
          ac.abort();
        }
      };
    });
  }

  request<T = unknown>(options: BackendSrvRequest): Promise<T> {
    return lastValueFrom(this.fetch<T>(options)).then((r) => r.data);
  }

  datasourceRequest<T = unknown>(options: BackendSrvRequest): Promise<FetchResponse<T>> {
    return lastValueFrom(this.fetch<T>(options));
  }

  get<T = unknown>(url: string, params?: Record<string, unknown>, requestId?: string, options?: Partial<BackendSrvRequest>): Promise<T> {
    return this.request<T>({ ...options, method: 'GET', url, params, requestId });
  }

  delete<T = unknown>(url: string, data?: unknown, options?: Partial<BackendSrvRequest>): Promise<T> {
    return this.request<T>({ ...options, method: 'DELETE', url, data });
  }

  post<T = unknown>(url: string, data?: unknown, options?: Partial<BackendSrvRequest>): Promise<T> {
    return this.request<T>({ ...options, method: 'POST', url, data });
  }

  patch<T = unknown>(url: string, data?: unknown, options?: Partial<BackendSrvRequest>): Promise<T> {
    return this.request<T>({ ...options, method: 'PATCH', url, data });
  }

  put<T = unknown>(url: string, data?: unknown, options?: Partial<BackendSrvRequest>): Promise<T> {
    return this.request<T>({ ...options, method: 'PUT', url, data });
  }

  chunked(options: BackendSrvRequest): Observable<FetchResponse<Uint8Array | undefined>> {
    throw new Error(`harness BackendSrv: chunked() is not implemented (${options.url})`);
  }
}

// --------------------------------------------------------------- TemplateSrv

/** A dashboard variable: a name and its current value(s). */
export interface HarnessVariable {
  name: string;
  value: string | string[];
  multi?: boolean;
}

/** The variables of the page's "dashboard". */
export const harnessVariables: HarnessVariable[] = [
  { name: 'job', value: '4242' },
  { name: 'user', value: ['alice', 'bob'], multi: true },
  { name: 'host', value: 'node-a' },
];

// Grafana's variable syntax (public/app/features/variables/utils.ts):
// $var, [[var]], [[var:fmt]], ${var}, ${var.field}, ${var:fmt}.
const variableRegex = /\$(\w+)|\[\[(\w+?)(?::(\w+))?\]\]|\${(\w+)(?:\.([^:^}]+))?(?::([^}]+))?}/g;

type Formatter = (value: unknown, variable: unknown, fallback?: unknown) => string;

function regexEscape(s: string): string {
  return s.replace(/[\\^$*+?.()|[\]{}/]/g, '\\$&');
}

/** Grafana's formatVariableValue for the formats plugins commonly ask for. */
function formatValue(value: string | string[], format: string | Formatter | undefined, variable: unknown): string {
  if (typeof format === 'function') {
    return format(value, variable, formatValue);
  }
  const arr = Array.isArray(value) ? value : [value];
  switch (format) {
    case 'raw':
    case 'text':
    case 'csv':
      return arr.join(',');
    case 'pipe':
      return arr.join('|');
    case 'json':
      return JSON.stringify(value);
    case 'singlequote':
      return arr.map((v) => `'${v.replace(/'/g, "\\'")}'`).join(',');
    case 'doublequote':
      return arr.map((v) => `"${v.replace(/"/g, '\\"')}"`).join(',');
    case 'regex':
      return arr.length === 1 ? regexEscape(arr[0]) : '(' + arr.map(regexEscape).join('|') + ')';
    case 'percentencode':
      return encodeURIComponent(arr.length === 1 ? arr[0] : '{' + arr.join(',') + '}');
    case 'queryparam':
      return arr.map((v) => 'var-' + encodeURIComponent(String(v))).join('&');
  }
  // Grafana's default: glob for several values.
  return Array.isArray(value) ? (value.length === 1 ? value[0] : '{' + value.join(',') + '}') : value;
}

/**
 * HarnessTemplateSrv replaces variables as Grafana's TemplateSrv does,
 * including its precedence: a format written in the text (${job:json})
 * wins over the format argument, even when that is a function.
 */
export class HarnessTemplateSrv implements TemplateSrv {
  constructor(private readonly vars: HarnessVariable[]) {}

  private timeRange?: TimeRange;

  getVariables(): TypedVariableModel[] {
    // Enough of Grafana's CustomVariableModel for the editors that list
    // variables; nothing in the plugin reads more.
    return this.vars.map(
      (v) =>
        ({
          type: 'custom',
          id: v.name,
          name: v.name,
          label: v.name,
          rootStateKey: 'harness',
          global: false,
          hide: 0,
          skipUrlSync: false,
          index: 0,
          state: 'Done',
          error: null,
          description: null,
          multi: Boolean(v.multi),
          includeAll: false,
          allValue: null,
          query: (Array.isArray(v.value) ? v.value : [v.value]).join(','),
          options: (Array.isArray(v.value) ? v.value : [v.value]).map((x) => ({ text: x, value: x, selected: true })),
          current: { text: v.value, value: v.value, selected: true },
        }) as unknown as TypedVariableModel
    );
  }

  private lookup(name: string): HarnessVariable | undefined {
    if (this.timeRange && (name === '__from' || name === '__to')) {
      const t = name === '__from' ? this.timeRange.from : this.timeRange.to;
      return { name, value: String(t.valueOf()) };
    }
    return this.vars.find((v) => v.name === name);
  }

  replace(target?: string, scopedVars?: ScopedVars, format?: string | Function): string {
    if (!target) {
      return target ?? '';
    }
    variableRegex.lastIndex = 0;
    return target.replace(variableRegex, (match, var1, var2, fmt2, var3, fieldPath, fmt3) => {
      const name: string = var1 || var2 || var3;
      const fmt = (fmt2 || fmt3 || format) as string | Formatter | undefined;
      const scoped = scopedVars?.[name];
      if (scoped && scoped.value !== undefined && scoped.value !== null && !fieldPath) {
        return formatValue(scoped.value as string | string[], fmt, { name });
      }
      const v = this.lookup(name);
      if (!v) {
        return match;
      }
      return formatValue(v.value, fmt, { name: v.name, multi: v.multi, current: { value: v.value, text: v.value } });
    });
  }

  containsTemplate(target?: string): boolean {
    if (!target) {
      return false;
    }
    variableRegex.lastIndex = 0;
    const m = variableRegex.exec(target);
    variableRegex.lastIndex = 0;
    return Boolean(m && this.lookup(m[1] || m[2] || m[4]));
  }

  updateTimeRange(timeRange: TimeRange): void {
    this.timeRange = timeRange;
  }
}

// ------------------------------------------------------------- DataSourceSrv

/** HarnessDataSourceSrv knows one datasource instance (by uid or name). */
export class HarnessDataSourceSrv implements DataSourceSrv {
  constructor(
    private readonly settings: DataSourceInstanceSettings,
    private readonly instance: () => DataSourceApi
  ) {}

  private matches(ref?: DataSourceRef | string | null): boolean {
    if (ref === undefined || ref === null || ref === 'default') {
      return true;
    }
    const key = typeof ref === 'string' ? ref : ref.uid;
    return key === undefined || key === this.settings.uid || key === this.settings.name;
  }

  get(ref?: DataSourceRef | string | null): Promise<DataSourceApi> {
    if (!this.matches(ref)) {
      return Promise.reject(new Error(`harness DataSourceSrv: unknown datasource ${JSON.stringify(ref)}`));
    }
    return Promise.resolve(this.instance());
  }

  getList(): DataSourceInstanceSettings[] {
    return [this.settings];
  }

  getInstanceSettings(ref?: DataSourceRef | string | null): DataSourceInstanceSettings | undefined {
    return this.matches(ref) ? this.settings : undefined;
  }

  reload(): Promise<void> {
    return Promise.resolve();
  }

  registerRuntimeDataSource(): void {
    throw new Error('harness DataSourceSrv: registerRuntimeDataSource is not implemented');
  }
}

/** installServices sets @grafana/runtime's singletons; call it before building a DataSource. */
export function installServices<Q extends DataQuery, O extends DataSourceJsonData>(
  settings: DataSourceInstanceSettings<O>,
  instance: () => DataSourceApi<Q, O>
): HarnessTemplateSrv {
  // What Grafana's app does first: the runtime's loggers exist (the
  // datasource lookups log through them, and getLogger throws in a
  // development build before this).
  initializeLoggersRegistry();
  setBackendSrv(new HarnessBackendSrv());
  const templateSrv = new HarnessTemplateSrv(harnessVariables);
  setTemplateSrv(templateSrv);
  setDataSourceSrv(new HarnessDataSourceSrv(settings as DataSourceInstanceSettings, instance as unknown as () => DataSourceApi));
  return templateSrv;
}

/**
 * registerDataSource puts the page's datasource instance in the runtime's
 * settings and instance caches, where Grafana core's boot puts the
 * configured ones (initDataSourceInstanceSettings, not exported):
 * DataSourceWithBackend.query looks each query's datasource ref up there,
 * and only then in the legacy DataSourceSrv, with a warning. The public
 * (unstable) way in is the registration of a RuntimeDataSource, which
 * carries its settings as instanceSettings; a DataSourceApi does not, so
 * they are attached to the instance first.
 */
export function registerDataSource<Q extends DataQuery, O extends DataSourceJsonData>(
  ds: DataSourceApi<Q, O>,
  settings: DataSourceInstanceSettings<O>
): void {
  Object.defineProperty(ds, 'instanceSettings', { value: settings, configurable: true });
  registerRuntimeDataSourceInstance({ dataSource: ds as unknown as RuntimeDataSource });
}
