// The datasource's query model and settings. They mirror the Go backend's
// Model (grafana-plugin/pkg/plugin/model.go) and Settings (settings.go):
// the JSON keys here are the contract between the two halves.
import type { DataQuery, DataSourceJsonData } from '@grafana/schema';

export const QueryType = {
  Flamegraph: 'flamegraph',
  ProfileSeries: 'profileSeries',
  GPUMetric: 'gpuMetric',
  TopEntities: 'topEntities',
  AttributeValues: 'attributeValues',
  Findings: 'findings',
} as const;
export type QueryTypeValue = (typeof QueryType)[keyof typeof QueryType];

export const queryTypeOptions: Array<{ value: QueryTypeValue; label: string; description: string }> = [
  { value: QueryType.Flamegraph, label: 'Flame graph', description: 'Profiles merged across the matching jobs and nodes' },
  { value: QueryType.ProfileSeries, label: 'Profile series', description: 'Profile totals over time, per group' },
  {
    value: QueryType.GPUMetric,
    label: 'Metrics',
    description: "A GPU metric, or a host metric from the jobs' cgroups, from Prometheus, per group (counters as per-second rates)",
  },
  { value: QueryType.TopEntities, label: 'Top', description: 'Jobs, users or nodes ranked by CPU time, GPU time or GPU utilisation' },
  { value: QueryType.AttributeValues, label: 'Attribute values', description: 'The values of one attribute (for variables)' },
  {
    value: QueryType.Findings,
    label: 'Findings',
    description: 'What jobs should change: idle GPUs, unused cores, memory over-requested or near its limit, OOM kills, ...',
  },
];

export type Aggregation = 'avg' | 'sum' | 'max' | 'min';
export type Rank = 'cpuTime' | 'gpuTime' | 'gpuUtilization' | 'wastedCoreHours' | 'wastedGPUHours';

/** The findings the backend computes (Go: findings.Kind). */
export type FindingKind =
  | 'oomKilled'
  | 'gpuIdle'
  | 'inputBound'
  | 'cpuUnderused'
  | 'memoryNearLimit'
  | 'memoryOverRequested'
  | 'gpuMemoryUnderused';

/** table: one row per finding; numeric: one number per finding, for alert rules. */
export type FindingsFormat = 'table' | 'numeric';

export interface SlurmQuery extends DataQuery {
  queryType?: QueryTypeValue;
  /** CEL over the attribute schema; "" matches everything. */
  filter?: string;
  /** flamegraph, profileSeries */
  profileType?: string;
  /** flamegraph: node budget (default 8192, as Pyroscope's) */
  maxNodes?: number;
  /** profileSeries, gpuMetric: dotted attribute names */
  groupBy?: string[];
  /** gpuMetric */
  metric?: string;
  aggregation?: Aggregation;
  window?: string;
  /** topEntities */
  entity?: string;
  rankBy?: Rank;
  limit?: number;
  /** attributeValues */
  attribute?: string;
  /** findings: one kind (unset: every kind), and the frames' shape */
  finding?: FindingKind;
  format?: FindingsFormat;
}

export const DEFAULT_MAX_NODES = 8192;
export const MAX_MAX_NODES = 65536;

export const defaultQuery: Partial<SlurmQuery> = {
  queryType: QueryType.Flamegraph,
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

/** GET /profile-types */
export interface ProfileTypeInfo {
  id: string;
  name: string;
}
