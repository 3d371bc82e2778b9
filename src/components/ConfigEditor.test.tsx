import { render, screen, within } from '@testing-library/react';
import userEvent from '@testing-library/user-event';
import React, { useState } from 'react';

import { ConfigEditor, Props } from './ConfigEditor';
import type { Settings } from './config';

function baseOptions(over: Partial<Settings> = {}): Settings {
  return {
    id: 1,
    uid: 'slurm',
    orgId: 1,
    name: 'slurmscope',
    type: 'slurmscope-slurm-datasource',
    typeName: 'slurmscope',
    typeLogoUrl: '',
    access: 'proxy',
    url: '',
    user: '',
    database: '',
    basicAuth: false,
    basicAuthUser: '',
    isDefault: false,
    jsonData: {},
    secureJsonFields: {},
    readOnly: false,
    withCredentials: false,
    ...over,
  } as Settings;
}

/** Feeds onOptionsChange back into props, as Grafana does; `latest()` is the last options object. */
function setup(initial: Settings = baseOptions(), extra: Partial<Props> = {}) {
  const changes: Settings[] = [];
  function Wrapper() {
    const [options, setOptions] = useState(initial);
    return (
      <ConfigEditor
        {...extra}
        options={options}
        onOptionsChange={(o) => {
          changes.push(o);
          setOptions(o);
        }}
      />
    );
  }
  // delay: null skips the per-keystroke timer; these forms re-render a lot.
  const user = userEvent.setup({ delay: null });
  render(<Wrapper />);
  const latest = () => changes[changes.length - 1];
  return { user, changes, latest };
}


const section = (name: string) => screen.getByRole('group', { name });

/**
 * Grafana's Field puts its description inside the <label>, so a label's text
 * is "<label>[ *]<Description>"; this matches the label part exactly (our
 * descriptions all start with a capital letter).
 */
const lbl = (text: string) => new RegExp(`^${text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}( \\*)?($|[A-Z])`);

describe('ConfigEditor', () => {
  it('typing a Pyroscope URL updates jsonData.pyroscope.url only', async () => {
    const initial = baseOptions({ jsonData: { tenantId: 't1', prometheus: { url: 'http://prom:9090' } } });
    const { user, latest } = setup(initial);
    await user.type(screen.getByTestId('slurmscope-config-pyroscope-url'), 'http://pyroscope:4040');

    expect(latest().jsonData).toEqual({
      tenantId: 't1',
      prometheus: { url: 'http://prom:9090' },
      pyroscope: { url: 'http://pyroscope:4040' },
    });
    expect(latest().url).toBe('');
    expect(latest().secureJsonData).toBeUndefined();
    // Immutable: the initial object is untouched.
    expect(initial.jsonData.pyroscope).toBeUndefined();
  });

  it('shows a validation message for a non-http(s) URL, and none for a good one', async () => {
    const { user } = setup();
    const input = screen.getByTestId('slurmscope-config-prometheus-url');
    await user.type(input, 'ftp://x');
    expect(within(section('Prometheus')).getByText(/Must be an http:\/\/ or https:\/\/ URL/)).toBeInTheDocument();

    await user.clear(input);
    await user.paste('https://prom.example:9090');
    expect(screen.queryByText(/Must be an http:\/\/ or https:\/\/ URL/)).not.toBeInTheDocument();
  });

  it('flags an empty Pyroscope URL as required once left, unless the data source URL stands in', async () => {
    const { user } = setup();
    const input = screen.getByTestId('slurmscope-config-pyroscope-url');
    expect(screen.queryByText('A URL is required')).not.toBeInTheDocument();
    await user.click(input);
    await user.tab();
    expect(within(section('Pyroscope')).getByText('A URL is required')).toBeInTheDocument();
  });

  it('treats the main data source URL as the Pyroscope fallback', async () => {
    const { user } = setup(baseOptions({ url: 'http://legacy:4040' }));
    const input = screen.getByTestId('slurmscope-config-pyroscope-url');
    expect(input).toHaveAttribute('placeholder', 'http://legacy:4040');
    await user.click(input);
    await user.tab();
    expect(screen.queryByText('A URL is required')).not.toBeInTheDocument();
  });

  it('choosing Basic shows user and password; the password goes to secureJsonData only', async () => {
    const { user, latest } = setup();
    const pyro = within(section('Pyroscope'));
    expect(pyro.queryByLabelText(lbl('User'))).not.toBeInTheDocument();

    await user.click(pyro.getByRole('radio', { name: 'Basic' }));
    expect(latest().jsonData.pyroscope?.auth).toBe('basic');

    await user.type(pyro.getByLabelText(lbl('User')), 'grafana');
    await user.type(pyro.getByLabelText(lbl('Password')), 's3cret');

    expect(latest().jsonData.pyroscope).toEqual({ auth: 'basic', basicAuthUser: 'grafana' });
    expect(latest().secureJsonData).toEqual({ pyroscopeBasicAuthPassword: 's3cret' });
    expect(JSON.stringify(latest().jsonData)).not.toContain('s3cret');
    // Prometheus is untouched.
    expect(latest().jsonData.prometheus).toBeUndefined();
    expect(within(section('Prometheus')).queryByLabelText(lbl('Password'))).not.toBeInTheDocument();
  });

  it('choosing Bearer shows a token field that writes <backend>BearerToken', async () => {
    const { user, latest } = setup();
    const prom = within(section('Prometheus'));
    await user.click(prom.getByRole('radio', { name: 'Bearer' }));
    expect(prom.queryByLabelText(lbl('User'))).not.toBeInTheDocument();
    await user.type(prom.getByLabelText(lbl('Token')), 'tok');
    expect(latest().jsonData.prometheus).toEqual({ auth: 'bearer' });
    expect(latest().secureJsonData).toEqual({ prometheusBearerToken: 'tok' });
  });

  it('shows a configured secret as configured and Reset clears it the Grafana way', async () => {
    const initial = baseOptions({
      jsonData: { prometheus: { url: 'http://prom:9090', auth: 'bearer' } },
      secureJsonFields: { prometheusBearerToken: true, pyroscopeBasicAuthPassword: true },
    });
    const { user, latest } = setup(initial);
    const prom = within(section('Prometheus'));
    const token = prom.getByLabelText(lbl('Token'));
    expect(token).toHaveValue('configured');
    expect(token).toBeDisabled();

    await user.click(prom.getByRole('button', { name: 'Reset' }));
    expect(latest().secureJsonFields).toEqual({ prometheusBearerToken: false, pyroscopeBasicAuthPassword: true });
    expect(latest().secureJsonData).toEqual({ prometheusBearerToken: '' });
    expect(latest().jsonData).toEqual(initial.jsonData);

    // Now editable again, and a new value replaces it.
    const fresh = prom.getByLabelText(lbl('Token'));
    expect(fresh).toBeEnabled();
    await user.type(fresh, 'new');
    expect(latest().secureJsonData).toEqual({ prometheusBearerToken: 'new' });
  });

  it('TLS switches reveal the certificate text areas and their secrets go to the right keys', async () => {
    const { user, latest } = setup();
    const pyro = within(section('Pyroscope'));
    expect(pyro.queryByLabelText(lbl('CA certificate'))).not.toBeInTheDocument();
    expect(pyro.queryByLabelText(lbl('Client certificate'))).not.toBeInTheDocument();

    await user.click(pyro.getByLabelText(lbl('With CA certificate')));
    await user.type(pyro.getByLabelText(lbl('CA certificate')), 'CA-PEM');
    await user.click(pyro.getByLabelText(lbl('Client authentication')));
    await user.type(pyro.getByLabelText(lbl('Client certificate')), 'CERT-PEM');
    await user.type(pyro.getByLabelText(lbl('Client key')), 'KEY-PEM');
    await user.click(pyro.getByLabelText(lbl('Skip TLS verification')));
    await user.type(pyro.getByLabelText(lbl('Server name')), 'pyro.internal');

    expect(pyro.getByLabelText(lbl('CA certificate')).tagName).toBe('TEXTAREA');
    expect(latest().jsonData.pyroscope).toEqual({
      tlsWithCACert: true,
      tlsClientAuth: true,
      tlsSkipVerify: true,
      tlsServerName: 'pyro.internal',
    });
    expect(latest().secureJsonData).toEqual({
      pyroscopeTlsCACert: 'CA-PEM',
      pyroscopeTlsClientCert: 'CERT-PEM',
      pyroscopeTlsClientKey: 'KEY-PEM',
    });
    expect(JSON.stringify(latest().jsonData)).not.toMatch(/PEM/);

    await user.click(pyro.getByLabelText(lbl('Client authentication')));
    expect(pyro.queryByLabelText(lbl('Client key'))).not.toBeInTheDocument();
    expect(latest().jsonData.pyroscope?.tlsClientAuth).toBe(false);
  });

  it('keeps Prometheus settings independent from Pyroscope', async () => {
    const initial = baseOptions({
      jsonData: { pyroscope: { url: 'http://pyro:4040', auth: 'basic', basicAuthUser: 'p', tlsWithCACert: true } },
      secureJsonFields: { pyroscopeTlsCACert: true },
    });
    const { user, latest } = setup(initial);
    const prom = within(section('Prometheus'));
    // Nothing of Pyroscope's shows in Prometheus's section.
    expect(prom.getByTestId('slurmscope-config-prometheus-url')).toHaveValue('');
    expect(prom.getByRole('radio', { name: 'None' })).toBeChecked();
    expect(prom.queryByLabelText(lbl('CA certificate'))).not.toBeInTheDocument();

    await user.click(prom.getByTestId('slurmscope-config-prometheus-url'));
    await user.paste('http://prom:9090');
    await user.type(prom.getByLabelText(lbl('Tenant ID override')), 'gpu');
    await user.click(prom.getByLabelText(lbl('With CA certificate')));
    await user.type(prom.getByLabelText(lbl('CA certificate')), 'PROM-CA');

    expect(prom.getByLabelText(lbl('CA certificate'))).toBeEnabled();
    expect(latest().jsonData.pyroscope).toEqual(initial.jsonData.pyroscope);
    expect(latest().jsonData.prometheus).toEqual({ url: 'http://prom:9090', tenantId: 'gpu', tlsWithCACert: true });
    expect(latest().secureJsonFields).toEqual({ pyroscopeTlsCACert: true });
    expect(latest().secureJsonData).toEqual({ prometheusTlsCACert: 'PROM-CA' });
  });

  it('edits tenant, default profile type and timeout in jsonData', async () => {
    const { user, latest } = setup();
    // The backend fills the default (schema's CPU profile type); the front
    // end does not spell its id.
    expect(screen.getByLabelText(lbl('Default profile type'))).toHaveAttribute('placeholder', "CPU time (the backend's default)");
    const timeout = screen.getByLabelText(lbl('Timeout (seconds)'));
    expect(timeout).toHaveAttribute('placeholder', '30');

    await user.type(screen.getByLabelText(lbl('Tenant ID')), 'acme');
    // paste: one input event for a long value (typing it is slow under jsdom).
    await user.click(screen.getByLabelText(lbl('Default profile type')));
    await user.paste('memory:alloc_space:bytes:space:bytes');
    await user.type(timeout, '45');
    expect(latest().jsonData).toEqual({
      tenantId: 'acme',
      defaultProfileType: 'memory:alloc_space:bytes:space:bytes',
      timeoutSeconds: 45,
    });
  });

  it('rejects a non-positive or fractional timeout and clears it back to the default', async () => {
    const { user, latest } = setup(baseOptions({ jsonData: { timeoutSeconds: 10 } }));
    const timeout = screen.getByLabelText(lbl('Timeout (seconds)'));
    expect(timeout).toHaveValue('10');

    await user.clear(timeout);
    expect(latest().jsonData.timeoutSeconds).toBeUndefined();
    await user.type(timeout, '0');
    expect(screen.getByText(/whole number of seconds greater than 0/)).toBeInTheDocument();
    expect(latest().jsonData.timeoutSeconds).toBeUndefined();
    await user.clear(timeout);
    await user.type(timeout, '2.5');
    expect(screen.getByText(/whole number of seconds greater than 0/)).toBeInTheDocument();
    await user.clear(timeout);
    await user.type(timeout, '12');
    expect(screen.queryByText(/whole number of seconds greater than 0/)).not.toBeInTheDocument();
    expect(latest().jsonData.timeoutSeconds).toBe(12);
  });

  it('job ownership: the switch reveals allow-lists; entries are trimmed, deduped, removable', async () => {
    const { user, latest } = setup();
    const own = within(section('Job ownership'));
    expect(own.queryByLabelText(lbl('Users who see all jobs'))).not.toBeInTheDocument();

    await user.click(own.getByLabelText(lbl('Users see only their own jobs')));
    expect(latest().jsonData.jobOwnership).toEqual({ enabled: true });
    expect(own.getByText(/slurm\.job\.user/)).toBeInTheDocument();

    const users = own.getByLabelText(lbl('Users who see all jobs'));
    await user.type(users, '  alice  {Enter}');
    await user.type(users, 'bob{Enter}');
    await user.type(users, ' alice{Enter}');
    await user.type(users, '   {Enter}');
    expect(latest().jsonData.jobOwnership?.allowUsers).toEqual(['alice', 'bob']);

    await user.type(own.getByLabelText(lbl('Teams who see all jobs')), ' hpc-admins {Enter}');
    expect(latest().jsonData.jobOwnership).toEqual({ enabled: true, allowUsers: ['alice', 'bob'], allowTeams: ['hpc-admins'] });
    expect(own.getByText(/forwards team membership/)).toBeInTheDocument();

    await user.click(own.getByRole('button', { name: 'Remove tag: alice' }));
    expect(latest().jsonData.jobOwnership?.allowUsers).toEqual(['bob']);
  });

  it('job ownership: match by login or email (with its domain), and alert queries off unless allowed', async () => {
    const { user, latest } = setup(baseOptions({ jsonData: { jobOwnership: { enabled: true } } }));
    const own = within(section('Job ownership'));
    expect(own.getByText(/LDAP, OAuth, an auth proxy/)).toBeInTheDocument();
    expect(own.queryByLabelText(lbl('Email domain'))).not.toBeInTheDocument();

    await user.click(own.getByRole('radio', { name: 'Email' }));
    expect(latest().jsonData.jobOwnership?.matchField).toBe('email');
    expect(own.getByText('Required when matching by email')).toBeInTheDocument();
    await user.type(own.getByLabelText(lbl('Email domain')), ' uni.example ');
    expect(latest().jsonData.jobOwnership?.emailDomain).toBe('uni.example');

    expect(own.getByText(/evaluates alert rules as an org admin/)).toBeInTheDocument();
    expect(latest().jsonData.jobOwnership?.allowAlertQueries).toBeUndefined();
    await user.click(own.getByLabelText(lbl('Allow alert queries')));
    expect(latest().jsonData.jobOwnership).toEqual({
      enabled: true,
      matchField: 'email',
      emailDomain: 'uni.example',
      allowAlertQueries: true,
    });

    await user.click(own.getByRole('radio', { name: 'Login' }));
    expect(latest().jsonData.jobOwnership?.matchField).toBe('login');
    expect(own.queryByLabelText(lbl('Email domain'))).not.toBeInTheDocument();
  });

  it('query limits: typed values go to jsonData, clearing removes the key', async () => {
    const { user, latest } = setup(baseOptions({ jsonData: { tenantId: 't', maxCallsPerQuery: 2048 } }));
    const limits = within(section('Query limits'));
    const length = limits.getByLabelText(lbl('Pyroscope max query length'));
    const concurrent = limits.getByLabelText(lbl('Max concurrent calls'));
    const calls = limits.getByLabelText(lbl('Max calls per query'));
    // Placeholders are the backend's defaults; a stored value shows as itself.
    expect(length).toHaveAttribute('placeholder', '24h');
    expect(concurrent).toHaveAttribute('placeholder', '8');
    expect(calls).toHaveValue('2048');
    expect(limits.getByText(/queried in chunks of it/)).toBeInTheDocument();

    await user.type(length, '1d12h');
    await user.type(concurrent, '16');
    expect(latest().jsonData).toEqual({
      tenantId: 't',
      maxCallsPerQuery: 2048,
      pyroscopeMaxQueryLength: '1d12h',
      maxConcurrentCalls: 16,
    });

    await user.clear(calls);
    await user.clear(length);
    expect(latest().jsonData).toEqual({ tenantId: 't', maxConcurrentCalls: 16 });
    expect('pyroscopeMaxQueryLength' in latest().jsonData).toBe(false);
  });

  it('query limits: an invalid duration or count shows its error and is not stored', async () => {
    const { user, latest } = setup();
    const limits = within(section('Query limits'));
    const length = limits.getByLabelText(lbl('Pyroscope max query length'));
    // paste: one input event, so no valid prefix ('30m') is stored on the way.
    await user.click(length);
    await user.paste('30m1h');
    expect(limits.getByText(/Must be a duration of at least 1s/)).toBeInTheDocument();
    await user.clear(length);
    await user.paste('500ms');
    expect(limits.getByText(/Must be a duration of at least 1s/)).toBeInTheDocument();
    await user.type(limits.getByLabelText(lbl('Max concurrent calls')), '0');
    expect(limits.getByText('Must be a whole number greater than 0')).toBeInTheDocument();
    expect(latest().jsonData).toEqual({});

    await user.clear(length);
    await user.paste('90m');
    expect(limits.queryByText(/Must be a duration of at least 1s/)).not.toBeInTheDocument();
    expect(latest().jsonData).toEqual({ pyroscopeMaxQueryLength: '90m' });
  });

  it('findings thresholds: percentages typed, ratios stored, clearing removes the key', async () => {
    const initial = baseOptions({ jsonData: { findings: { gpuIdleBelow: 0.05 } } });
    const { user, latest } = setup(initial);
    const f = within(section('Findings thresholds'));
    expect(f.getByLabelText(lbl('GPU idle below (%)'))).toHaveValue('5');
    expect(f.getByLabelText(lbl('CPU efficiency below (%)'))).toHaveAttribute('placeholder', '50');
    expect(f.getByLabelText(lbl('GPU idle below (%)'))).toHaveAttribute('placeholder', '1');
    expect(f.getByText(/is a cpuUnderused finding\. Default 50%\./)).toBeInTheDocument();

    await user.type(f.getByLabelText(lbl('CPU efficiency below (%)')), '29');
    await user.type(f.getByLabelText(lbl('Memory used above (%)')), '95.5');
    expect(latest().jsonData.findings).toEqual({ gpuIdleBelow: 0.05, cpuEfficiencyBelow: 0.29, memoryUsedAbove: 0.955 });

    await user.clear(f.getByLabelText(lbl('GPU idle below (%)')));
    expect(latest().jsonData.findings).toEqual({ cpuEfficiencyBelow: 0.29, memoryUsedAbove: 0.955 });
    await user.clear(f.getByLabelText(lbl('CPU efficiency below (%)')));
    await user.clear(f.getByLabelText(lbl('Memory used above (%)')));
    expect(latest().jsonData).toEqual({});
  });

  it('the straggler threshold: a ratio to the median, typed and stored as it is', async () => {
    const { user, latest } = setup(baseOptions({ jsonData: { findings: { stragglerAbove: 2 } } }));
    const f = within(section('Findings thresholds'));
    const field = f.getByLabelText(lbl('Straggler above (× the median)'));
    expect(field).toHaveValue('2');
    expect(field).toHaveAttribute('placeholder', '1.5');
    expect(f.getByText(/is a straggler finding\. A ratio above 1\. Default 1\.5×\./)).toBeInTheDocument();
    await user.clear(field);
    await user.type(field, '1.25');
    expect(latest().jsonData.findings).toEqual({ stragglerAbove: 1.25 });
    await user.clear(field);
    expect(latest().jsonData).toEqual({});
  });

  it('findings thresholds: out of range, or memory used below not under above, shows errors', async () => {
    const { user } = setup();
    const f = within(section('Findings thresholds'));
    await user.type(f.getByLabelText(lbl('GPU idle below (%)')), '101');
    expect(f.getByText('Must be a percentage above 0 and at most 100')).toBeInTheDocument();
    await user.clear(f.getByLabelText(lbl('GPU idle below (%)')));
    expect(f.queryByText('Must be a percentage above 0 and at most 100')).not.toBeInTheDocument();

    // Against the default memory used above, 90%.
    await user.type(f.getByLabelText(lbl('Memory used below (%)')), '92');
    expect(f.getByText('Must be under "memory used above" (90%)')).toBeInTheDocument();
    expect(f.getByText('Must be over "memory used below" (92%)')).toBeInTheDocument();
    await user.type(f.getByLabelText(lbl('Memory used above (%)')), '93');
    expect(f.queryByText(/Must be under "memory used above"/)).not.toBeInTheDocument();
  });

  it.each([
    ['Query limits', 'Pyroscope max query length', '1m1h', '2h'],
    ['Query limits', 'Max calls per query', '-3', '3'],
    ['Findings thresholds', 'CPU saturated above (%)', '0', '80'],
    ['Findings thresholds', 'Memory used above (%)', '10', '30'],
    ['Findings thresholds', 'Straggler above (× the median)', '150', '2'],
  ])('%s: an invalid %s (%j) fails the registered validator until fixed', async (name, label, bad, good) => {
    let validator: (() => boolean | Promise<boolean>) | undefined;
    const validation = {
      registerValidation: (v: () => boolean | Promise<boolean>) => {
        validator = v;
        return () => {
          validator = undefined;
        };
      },
      validate: async () => true,
      isValid: () => true,
    } as unknown as NonNullable<Props['validation']>;
    const { user } = setup(baseOptions({ url: 'http://pyroscope:4040' }), { validation });
    const input = within(section(name)).getByLabelText(lbl(label));
    expect(await validator?.()).toBe(true);
    await user.type(input, bad);
    expect(await validator?.()).toBe(false);
    await user.clear(input);
    await user.type(input, good);
    expect(await validator?.()).toBe(true);
  });

  it('registers a validator that fails while a URL is malformed', async () => {
    let validator: (() => boolean | Promise<boolean>) | undefined;
    const validation = {
      registerValidation: (v: () => boolean | Promise<boolean>) => {
        validator = v;
        return () => {
          validator = undefined;
        };
      },
      validate: async () => true,
      isValid: () => true,
    } as unknown as NonNullable<Props['validation']>;
    const { user } = setup(baseOptions(), { validation });
    expect(await validator?.()).toBe(true);
    await user.type(screen.getByTestId('slurmscope-config-pyroscope-url'), 'pyroscope:4040');
    expect(await validator?.()).toBe(false);
  });
});
