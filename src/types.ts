// The datasource's query model and settings. The query types, their
// fields and the values those take are generated from the Go registry
// (queryTypes.gen.ts, from grafana-plugin/pkg/query/querytype); the
// settings mirror the Go backend's Settings (settings.go). The JSON keys
// here are the contract between the two halves.
import type { DataQuery, DataSourceJsonData } from '@grafana/schema';

import { Aggregation, DEFAULT_QUERY_TYPE, QueryTypeFields, QueryTypeValue } from './queryTypes.gen';

export * from './queryTypes.gen';

/** A query: the fields every type has, and those of its type (Go: plugin.Model and querytype). */
export interface SlurmQuery extends DataQuery, QueryTypeFields {
  queryType?: QueryTypeValue;
  /** CEL over the attribute schema; "" matches everything. */
  filter?: string;
}

export const defaultQuery: Partial<SlurmQuery> = {
  queryType: DEFAULT_QUERY_TYPE,
  filter: '',
};

export type BackendName = 'pyroscope' | 'prometheus';
export type AuthKind = '' | 'basic' | 'bearer';

/** One backend's connection (Go: BackendSettings). */
export interface BackendSettings {
  url?: string;
  tenantId?: string;
  auth?: AuthKind;
  basicAuthUser?: string;
  tlsSkipVerify?: boolean;
  tlsServerName?: string;
  tlsClientAuth?: boolean;
  tlsWithCACert?: boolean;
}

export type OwnershipMatch = 'login' | 'email';

/** jsonData (Go: Settings). */
export interface SlurmOptions extends DataSourceJsonData {
  pyroscope?: BackendSettings;
  prometheus?: BackendSettings;
  tenantId?: string;
  defaultProfileType?: string;
  timeoutSeconds?: number;
  jobOwnership?: {
    enabled?: boolean;
    allowUsers?: string[];
    allowTeams?: string[];
    /** The Grafana user field matched to slurm.job.user (Go: MatchLogin, MatchEmail); default login. */
    matchField?: OwnershipMatch;
    /** With matchField email: the one domain whose addresses name Slurm users. */
    emailDomain?: string;
    /** Alert rules may query (and see every job: Grafana evaluates them as an org admin). */
    allowAlertQueries?: boolean;
  };
  /** Pyroscope's max_query_length, a Prometheus duration ("24h", "1d"); longer ranges go in chunks of it. */
  pyroscopeMaxQueryLength?: string;
  /** Backend calls one query has in flight. */
  maxConcurrentCalls?: number;
  /** Pyroscope calls one query may make (selectors × time chunks). */
  maxCallsPerQuery?: number;
  /** Finding thresholds; unset ones take the backend's defaults. */
  findings?: FindingThresholds;
}

/** Shares in (0, 1] that findings are judged by (Go: findings.Thresholds). */
export interface FindingThresholds {
  cpuEfficiencyBelow?: number;
  memoryUsedBelow?: number;
  memoryUsedAbove?: number;
  gpuIdleBelow?: number;
  gpuMemoryUsedBelow?: number;
  gpuUtilizationBelow?: number;
  cpuSaturatedAbove?: number;
  /** Not a share: a ratio above 1, a rank's time over the median rank's. */
  stragglerAbove?: number;
}

/** secureJsonData keys, per backend: `${backend}${SecretKey}` (Go: settings.go). */
export const SecretKey = {
  BasicAuthPassword: 'BasicAuthPassword',
  BearerToken: 'BearerToken',
  TlsCACert: 'TlsCACert',
  TlsClientCert: 'TlsClientCert',
  TlsClientKey: 'TlsClientKey',
} as const;
export type SecretKeyValue = (typeof SecretKey)[keyof typeof SecretKey];

export function secretName(backend: BackendName, key: SecretKeyValue): string {
  return backend + key;
}

export type SlurmSecureOptions = Partial<Record<string, string>>;

/** GET /attributes */
export interface AttributeInfo {
  name: string;
  type: string;
  description: string;
}

/** One problem from GET|POST /validate; Column counts code points. */
export interface FilterIssue {
  line: number;
  column: number;
  offset: number;
  message: string;
}

export interface ValidateResult {
  ok: boolean;
  issues?: FilterIssue[];
}

/** GET /metrics */
export interface MetricInfo {
  name: string;
  level: string;
  unit: string;
  aggregation: Aggregation;
  /** gauge or counter (shown as a per-second rate) */
  type?: string;
}

/**
 * GET /profile-types: the schema's types, one per sample type (off-CPU time
 * is two: blocked, and waiting for a CPU), then Pyroscope's others.
 */
export interface ProfileTypeInfo {
  id: string;
  name: string;
  /** What the type measures; the schema's types have one. */
  description?: string;
}
