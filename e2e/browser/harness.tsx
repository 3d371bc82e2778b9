// The browser test's page: the plugin's real ConfigEditor and QueryEditor
// under @grafana/ui's theme, talking to the real Go datasource through the
// harness server's stand-in for Grafana's API, and @grafana/flamegraph
// rendering what the datasource returns. See README.md.
//
// Test hooks (data-testid): harness-options (ConfigEditor's options JSON),
// harness-query (QueryEditor's query JSON), harness-run (runs the query),
// harness-run-status (idle, running, done or error), harness-run-error,
// harness-flamegraph (the FlameGraph's container), harness-crash (an
// editor threw while rendering).
import { css, cx } from '@emotion/css';
import {
  CoreApp,
  createTheme,
  DataFrame,
  DataSourceInstanceSettings,
  DataSourcePluginMeta,
  DataSourceSettings,
  dateTime,
  LoadingState,
  PanelData,
  PluginType,
  TimeRange,
} from '@grafana/data';
import { FlameGraph } from '@grafana/flamegraph';
import { Button, GlobalStyles, PortalContainer, ThemeContext } from '@grafana/ui';
import React, { Component, ErrorInfo, memo, ReactNode, useCallback, useMemo, useRef, useState } from 'react';
import { createRoot } from 'react-dom/client';
import { Subscription } from 'rxjs';

import { ConfigEditor } from '../../src/components/ConfigEditor';
import { QueryEditor } from '../../src/components/QueryEditor';
import { DataSource } from '../../src/datasource';
import pluginJson from '../../src/plugin.json';
import { QueryType, SlurmOptions, SlurmQuery, SlurmSecureOptions } from '../../src/types';
import { installServices, registerDataSource, requestLog } from './grafana';

const theme = createTheme({ colors: { mode: 'dark' } });
const getTheme = () => theme;

// The range of the recorded Pyroscope calls (shared/fixtures/pyroscope:
// start = T0-45 s, end = T0+135 s); the replay does not compare ranges,
// but the page asks for the one the recording has data in.
const range: TimeRange = (() => {
  const from = dateTime(1796019480000);
  const to = dateTime(1796019660000);
  return { from, to, raw: { from, to } };
})();

const meta: DataSourcePluginMeta<SlurmOptions> = {
  id: pluginJson.id,
  name: pluginJson.name,
  type: PluginType.datasource,
  module: 'public/plugins/' + pluginJson.id + '/module.js',
  baseUrl: 'public/plugins/' + pluginJson.id,
  backend: true,
  metrics: true,
  alerting: true,
  info: {
    author: { name: pluginJson.info.author.name },
    description: pluginJson.info.description,
    keywords: pluginJson.info.keywords,
    links: [],
    logos: { small: '', large: '' },
    screenshots: [],
    updated: '',
    version: 'harness',
  },
};

// What the backend is configured with (the harness server's Settings):
// Pyroscope only, the replay's URL being the server's business.
const jsonData: SlurmOptions = { pyroscope: { url: 'http://replay-pyroscope' } };

const instanceSettings: DataSourceInstanceSettings<SlurmOptions> = {
  id: 1,
  uid: 'slurmscope',
  type: pluginJson.id,
  name: 'slurmscope',
  meta,
  readOnly: false,
  jsonData,
  access: 'proxy',
  isDefault: true,
};

let datasource: DataSource | undefined;
const templateSrv = installServices(instanceSettings, () => datasource!);
templateSrv.updateTimeRange(range);
datasource = new DataSource(instanceSettings);
const ds: DataSource = datasource;
registerDataSource(ds, instanceSettings);

const initialOptions: DataSourceSettings<SlurmOptions, SlurmSecureOptions> = {
  id: 1,
  uid: 'slurmscope',
  orgId: 1,
  name: 'slurmscope',
  typeLogoUrl: '',
  type: pluginJson.id,
  typeName: pluginJson.name,
  access: 'proxy',
  url: '',
  user: '',
  database: '',
  basicAuth: false,
  basicAuthUser: '',
  isDefault: true,
  jsonData: {},
  secureJsonData: {},
  secureJsonFields: {},
  readOnly: false,
  withCredentials: false,
  version: 1,
};

const initialQuery: SlurmQuery = {
  refId: 'A',
  datasource: { type: pluginJson.id, uid: 'slurmscope' },
  queryType: QueryType.Flamegraph,
  filter: 'slurm.job.id == "4242"',
};

// ------------------------------------------------------------------ layout

const styles = {
  page: css({ padding: theme.spacing(2), display: 'flex', flexDirection: 'column', gap: theme.spacing(2) }),
  // QueryEditor over the result on the left, the (tall) ConfigEditor on
  // the right: the interesting part stays at the top of a screenshot. The
  // flame graph shows its table beside the graph only from 800 px wide.
  columns: css({
    display: 'grid',
    gridTemplateColumns: 'minmax(0, 3fr) minmax(0, 2fr)',
    gridTemplateRows: 'auto 1fr',
    gap: theme.spacing(2),
    alignItems: 'start',
  }),
  query: css({ gridColumn: 1, gridRow: 1 }),
  result: css({ gridColumn: 1, gridRow: 2 }),
  config: css({ gridColumn: 2, gridRow: '1 / span 2' }),
  panel: css({
    background: theme.colors.background.primary,
    border: `1px solid ${theme.colors.border.weak}`,
    borderRadius: theme.shape.radius.default,
    padding: theme.spacing(2),
    minWidth: 0,
  }),
  pre: css({ fontSize: theme.typography.bodySmall.fontSize, maxHeight: 240, overflow: 'auto', margin: theme.spacing(1, 0, 0) }),
  flame: css({ minHeight: 420, display: 'flex', flexDirection: 'column' }),
  row: css({ display: 'flex', gap: theme.spacing(2), alignItems: 'center' }),
  // The editor alone, for the catalog screenshot: a margin of its own panel.
  shot: css({ padding: theme.spacing(1), margin: theme.spacing(0, -1) }),
  error: css({ color: theme.colors.error.text }),
};

/** Shows an editor's crash in place (and still logs it, failing the test). */
class Boundary extends Component<{ name: string; children: ReactNode }, { error?: Error }> {
  state: { error?: Error } = {};

  static getDerivedStateFromError(error: Error) {
    return { error };
  }

  componentDidCatch(error: Error, info: ErrorInfo) {
    console.error(`harness: ${this.props.name} crashed:`, error, info.componentStack);
  }

  render() {
    if (this.state.error) {
      return (
        <pre data-testid="harness-crash" className={styles.error}>
          {this.props.name} crashed: {String(this.state.error.stack ?? this.state.error)}
        </pre>
      );
    }
    return this.props.children;
  }
}

/** The ConfigEditor with its options; its own state, so that typing here re-renders nothing else. */
function ConfigSection() {
  const [options, setOptions] = useState(initialOptions);
  const optionsJSON = useMemo(() => JSON.stringify(options, null, 2), [options]);
  return (
    <section className={cx(styles.panel, styles.config)} data-testid="harness-config">
      <h2>ConfigEditor</h2>
      <Boundary name="ConfigEditor">
        <ConfigEditor options={options} onOptionsChange={setOptions} />
      </Boundary>
      <h3>options</h3>
      <pre className={styles.pre} data-testid="harness-options">
        {optionsJSON}
      </pre>
    </section>
  );
}

type RunStatus = 'idle' | 'running' | 'done' | 'error';

/** The flame graph of the last run; memoised, as a panel only re-renders for new data. */
const FlameGraphResult = memo(function FlameGraphResult({ frame }: { frame?: DataFrame }) {
  return (
    <div className={styles.flame} data-testid="harness-flamegraph">
      {frame && <FlameGraph data={frame} getTheme={getTheme} />}
    </div>
  );
});

/** The QueryEditor, its query, and the result of running it. */
function QuerySection() {
  const [query, setQuery] = useState<SlurmQuery>(initialQuery);
  // onRunQuery usually follows onChange in the same tick: the ref has the
  // query the editor just set, the state not yet.
  const queryRef = useRef(query);
  const [status, setStatus] = useState<RunStatus>('idle');
  const [runError, setRunError] = useState('');
  const [frame, setFrame] = useState<DataFrame | undefined>();
  const [panelData, setPanelData] = useState<PanelData | undefined>();
  const [runs, setRuns] = useState(0);
  const sub = useRef<Subscription | undefined>(undefined);

  const onChange = useCallback((q: SlurmQuery) => {
    queryRef.current = q;
    setQuery(q);
  }, []);

  const run = useCallback(() => {
    const q = queryRef.current;
    sub.current?.unsubscribe();
    setStatus('running');
    setRunError('');
    setRuns((n) => n + 1);
    const started = Date.now();
    sub.current = ds
      .query({
        requestId: 'harness-A',
        app: CoreApp.PanelEditor,
        interval: '1s',
        intervalMs: 1000,
        maxDataPoints: 1000,
        range,
        rangeRaw: range.raw,
        scopedVars: {},
        targets: [q],
        timezone: 'utc',
        startTime: started,
      })
      .subscribe({
        next: (res) => {
          const series = res.data as DataFrame[];
          const errors = res.errors ?? (res.error ? [res.error] : []);
          setPanelData({
            state: errors.length ? LoadingState.Error : LoadingState.Done,
            series,
            errors,
            timeRange: range,
          });
          if (errors.length) {
            setFrame(undefined);
            setRunError(errors.map((e) => e.message ?? String(e.data?.message ?? 'error')).join('; '));
            setStatus('error');
            return;
          }
          if (!series.length) {
            setFrame(undefined);
            setRunError('the query returned no frames');
            setStatus('error');
            return;
          }
          setFrame(series[0]);
          setStatus('done');
        },
        error: (e: unknown) => {
          setFrame(undefined);
          setRunError(e instanceof Error ? e.message : JSON.stringify(e));
          setStatus('error');
        },
      });
  }, []);

  const queryJSON = useMemo(() => JSON.stringify(query, null, 2), [query]);

  return (
    <>
      <section className={cx(styles.panel, styles.query)} data-testid="harness-query-editor">
        <h2>QueryEditor</h2>
        <div data-testid="harness-query-editor-ui" className={styles.shot}>
          <Boundary name="QueryEditor">
            <QueryEditor
              datasource={ds}
              query={query}
              onChange={onChange}
              onRunQuery={run}
              range={range}
              data={panelData}
              app={CoreApp.PanelEditor}
            />
          </Boundary>
        </div>
        <h3>query</h3>
        <pre className={styles.pre} data-testid="harness-query">
          {queryJSON}
        </pre>
      </section>
      <section className={cx(styles.panel, styles.result)} data-testid="harness-result">
        <div className={styles.row}>
          <h2>Run query</h2>
          <Button data-testid="harness-run" onClick={run} icon="play">
            Run query
          </Button>
          <span data-testid="harness-run-status" data-runs={runs}>
            {status}
          </span>
          {runError && (
            <span data-testid="harness-run-error" className={styles.error}>
              {runError}
            </span>
          )}
        </div>
        <FlameGraphResult frame={frame} />
      </section>
    </>
  );
}

function Harness() {
  return (
    <div className={styles.page}>
      <h1>slurmscope datasource: browser test harness</h1>
      <div className={styles.columns}>
        <ConfigSection />
        <QuerySection />
      </div>
    </div>
  );
}

// No StrictMode: Grafana does not render plugins under it, and its double
// renders would halve the speed of typing in a development build.
function App() {
  return (
    <ThemeContext.Provider value={theme}>
      <GlobalStyles />
      <Harness />
      <PortalContainer />
    </ThemeContext.Provider>
  );
}

declare global {
  interface Window {
    __harness?: { datasource: DataSource; requests: typeof requestLog };
  }
}
window.__harness = { datasource: ds, requests: requestLog };

createRoot(document.getElementById('root')!).render(<App />);
