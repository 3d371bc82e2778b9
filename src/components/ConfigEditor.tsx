// The datasource's settings page: one section per backend (Pyroscope for
// profiles, Prometheus for GPU metrics), general settings, job ownership,
// query limits and findings thresholds.
// jsonData mirrors pkg/plugin/settings.go; secrets go only to secureJsonData.
import React, { ChangeEvent, ReactNode, useEffect, useId, useRef, useState } from 'react';

import type { DataSourcePluginOptionsEditorProps, SelectableValue } from '@grafana/data';
import {
  Field,
  FieldSet,
  Input,
  RadioButtonGroup,
  SecretInput,
  SecretTextArea,
  Switch,
  TagsInput,
  Text,
} from '@grafana/ui';

import {
  AuthKind,
  BackendName,
  OwnershipMatch,
  SecretKey,
  SecretKeyValue,
  SlurmOptions,
  SlurmSecureOptions,
  secretName,
} from '../types';
import {
  DEFAULT_TIMEOUT_SECONDS,
  Settings,
  normalizeList,
  parsePositiveInt,
  resetSecret,
  setBackend,
  setJsonData,
  setOwnership,
  setSecret,
  urlError,
} from './config';
import { LimitsSection } from './LimitsSection';

export type Props = DataSourcePluginOptionsEditorProps<SlurmOptions, SlurmSecureOptions>;

interface SectionProps {
  options: Settings;
  onOptionsChange: (options: Settings) => void;
}

const matchOptions: Array<SelectableValue<OwnershipMatch>> = [
  { label: 'Login', value: 'login' },
  { label: 'Email', value: 'email' },
];

const authOptions: Array<SelectableValue<AuthKind>> = [
  { label: 'None', value: '' },
  { label: 'Basic', value: 'basic' },
  { label: 'Bearer', value: 'bearer' },
];

export function ConfigEditor({ options, onOptionsChange, validation }: Props) {
  const { jsonData } = options;
  const [timeoutText, setTimeoutText] = useState(jsonData.timeoutSeconds ? String(jsonData.timeoutSeconds) : '');
  const [limitsInvalid, setLimitsInvalid] = useState(false);
  const id = useId();

  const timeoutInvalid = parsePositiveInt(timeoutText) === null;
  const own = jsonData.jobOwnership;
  const hasErrors =
    timeoutInvalid ||
    limitsInvalid ||
    // The backend refuses email matching without the domain that names Slurm users.
    (!!own?.enabled && own.matchField === 'email' && !own.emailDomain) ||
    // Only malformed URLs block saving; an empty one just leaves that backend off.
    [jsonData.pyroscope?.url, jsonData.prometheus?.url].some((u) => !!u && urlError(u, false) !== undefined);

  // Grafana's (alpha) validation API, where present, stops Save with invalid fields.
  const hasErrorsRef = useRef(hasErrors);
  useEffect(() => {
    hasErrorsRef.current = hasErrors;
  });
  useEffect(() => validation?.registerValidation(() => !hasErrorsRef.current), [validation]);

  const onTimeout = (e: ChangeEvent<HTMLInputElement>) => {
    const text = e.currentTarget.value;
    setTimeoutText(text);
    const n = parsePositiveInt(text);
    if (n !== null) {
      onOptionsChange(setJsonData(options, { timeoutSeconds: n }));
    }
  };

  const ownership = jsonData.jobOwnership ?? {};

  return (
    <div style={{ maxWidth: 720 }}>
      <BackendSection
        backend="pyroscope"
        title="Pyroscope"
        description="Profiles are read from Pyroscope's HTTP API."
        options={options}
        onOptionsChange={onOptionsChange}
      />
      <BackendSection
        backend="prometheus"
        title="Prometheus"
        description="GPU metrics are read from a Prometheus-compatible API. Optional: without it, GPU queries are unavailable."
        options={options}
        onOptionsChange={onOptionsChange}
      />

      <FieldSet label="General">
        <Field label="Tenant ID" description="Sent as X-Scope-OrgID to both backends, unless a backend sets its own.">
          <Input
            id={`${id}-tenant`}
            value={jsonData.tenantId ?? ''}
            placeholder="None"
            onChange={(e) => onOptionsChange(setJsonData(options, { tenantId: e.currentTarget.value }))}
          />
        </Field>
        <Field
          label="Default profile type"
          description="Used by queries that name none: a Pyroscope profile type id, as the query editor lists them."
        >
          <Input
            id={`${id}-profile-type`}
            value={jsonData.defaultProfileType ?? ''}
            placeholder="CPU time (the backend's default)"
            onChange={(e) => onOptionsChange(setJsonData(options, { defaultProfileType: e.currentTarget.value }))}
          />
        </Field>
        <Field
          label="Timeout (seconds)"
          description="Bounds each call to a backend."
          invalid={timeoutInvalid}
          error="Must be a whole number of seconds greater than 0"
        >
          <Input
            id={`${id}-timeout`}
            inputMode="numeric"
            value={timeoutText}
            placeholder={String(DEFAULT_TIMEOUT_SECONDS)}
            onChange={onTimeout}
          />
        </Field>
      </FieldSet>

      <FieldSet label="Job ownership">
        <Field
          label="Users see only their own jobs"
          description="A Grafana user field is matched to slurm.job.user. Org admins see all jobs. Only as strong as the identity: users must come from a source they cannot change (LDAP, OAuth, an auth proxy), since a local Grafana user can rename their own login and email."
        >
          <Switch
            id={`${id}-ownership`}
            value={!!ownership.enabled}
            onChange={(e) => onOptionsChange(setOwnership(options, { enabled: e.currentTarget.checked }))}
          />
        </Field>
        {ownership.enabled && (
          <>
            <Field label="Match users by" description="The Grafana user field compared with each job's user.">
              <RadioButtonGroup
                id={`${id}-match`}
                options={matchOptions}
                value={ownership.matchField ?? 'login'}
                onChange={(v) => onOptionsChange(setOwnership(options, { matchField: v }))}
              />
            </Field>
            {ownership.matchField === 'email' && (
              <Field
                label="Email domain"
                description="The address bob@<domain> sees bob's jobs; an address in any other domain sees none."
                invalid={!ownership.emailDomain}
                error={!ownership.emailDomain ? 'Required when matching by email' : undefined}
              >
                <Input
                  id={`${id}-email-domain`}
                  value={ownership.emailDomain ?? ''}
                  placeholder="uni.example"
                  onChange={(e) => onOptionsChange(setOwnership(options, { emailDomain: e.currentTarget.value.trim() }))}
                />
              </Field>
            )}
            <Field
              label="Allow alert queries"
              description="Grafana evaluates alert rules as an org admin, so ownership cannot narrow them: while this is on, anyone who may write an alert rule on this datasource sees every user's jobs through it. Off, alert queries are refused."
            >
              <Switch
                id={`${id}-allow-alerts`}
                value={!!ownership.allowAlertQueries}
                onChange={(e) => onOptionsChange(setOwnership(options, { allowAlertQueries: e.currentTarget.checked }))}
              />
            </Field>
            <Field label="Users who see all jobs" description="Grafana logins, like admins.">
              <TagsInput
                id={`${id}-allow-users`}
                tags={ownership.allowUsers ?? []}
                placeholder="Login (Enter to add)"
                addOnBlur
                onChange={(tags) => onOptionsChange(setOwnership(options, { allowUsers: normalizeList(tags) }))}
              />
            </Field>
            <Field
              label="Teams who see all jobs"
              description="Team names. Applies only if Grafana forwards team membership to the plugin, which it does not by default: prefer listing users."
            >
              <TagsInput
                id={`${id}-allow-teams`}
                tags={ownership.allowTeams ?? []}
                placeholder="Team (Enter to add)"
                addOnBlur
                onChange={(tags) => onOptionsChange(setOwnership(options, { allowTeams: normalizeList(tags) }))}
              />
            </Field>
          </>
        )}
      </FieldSet>

      <LimitsSection options={options} onOptionsChange={onOptionsChange} onInvalidChange={setLimitsInvalid} />
    </div>
  );
}

interface BackendSectionProps extends SectionProps {
  backend: BackendName;
  title: string;
  description: string;
}

function BackendSection({ backend, title, description, options, onOptionsChange }: BackendSectionProps) {
  const id = useId();
  const [urlTouched, setUrlTouched] = useState(false);
  const b = options.jsonData[backend] ?? {};
  const set = (patch: Parameters<typeof setBackend>[2]) => onOptionsChange(setBackend(options, backend, patch));

  // Go falls back to the datasource's main URL for Pyroscope (ParseSettings).
  const fallbackUrl = backend === 'pyroscope' ? options.url || '' : '';
  const required = backend === 'pyroscope' && fallbackUrl === '';
  const url = b.url ?? '';
  const error = urlError(url, required);
  // An empty required URL is only flagged once the user has left the field.
  const showError = !!error && (url.trim() !== '' || urlTouched);

  const secret = (label: string, key: SecretKeyValue, multiline?: { placeholder: string }): ReactNode => (
    <SecretField
      label={label}
      name={secretName(backend, key)}
      id={`${id}-${key}`}
      multiline={multiline}
      options={options}
      onOptionsChange={onOptionsChange}
    />
  );

  return (
    <FieldSet label={title}>
      <Text element="p" color="secondary">
        {description}
      </Text>
      <Field
        label="URL"
        required={required}
        invalid={showError}
        error={error}
        description={fallbackUrl && !url ? `Empty: uses the data source URL ${fallbackUrl}` : undefined}
      >
        <Input
          id={`${id}-url`}
          data-testid={`slurmscope-config-${backend}-url`}
          value={url}
          placeholder={fallbackUrl || (backend === 'pyroscope' ? 'http://pyroscope:4040' : 'http://prometheus:9090')}
          onChange={(e) => set({ url: e.currentTarget.value.trim() })}
          onBlur={() => setUrlTouched(true)}
        />
      </Field>
      <Field label="Tenant ID override" description="Sent as X-Scope-OrgID instead of the general tenant ID.">
        <Input
          id={`${id}-tenant`}
          value={b.tenantId ?? ''}
          placeholder={options.jsonData.tenantId || 'Use the general tenant ID'}
          onChange={(e) => set({ tenantId: e.currentTarget.value })}
        />
      </Field>

      <Field label="Authentication">
        <RadioButtonGroup<AuthKind>
          aria-label={`${title} authentication`}
          options={authOptions}
          value={b.auth ?? ''}
          onChange={(auth) => set({ auth })}
        />
      </Field>
      {b.auth === 'basic' && (
        <>
          <Field label="User">
            <Input
              id={`${id}-user`}
              value={b.basicAuthUser ?? ''}
              onChange={(e) => set({ basicAuthUser: e.currentTarget.value })}
            />
          </Field>
          {secret('Password', SecretKey.BasicAuthPassword)}
        </>
      )}
      {b.auth === 'bearer' && secret('Token', SecretKey.BearerToken)}

      <Text element="h4">TLS</Text>
      <Field label="Skip TLS verification" description="Accept any server certificate. Insecure: for testing only.">
        <Switch
          id={`${id}-skip-verify`}
          value={!!b.tlsSkipVerify}
          onChange={(e) => set({ tlsSkipVerify: e.currentTarget.checked })}
        />
      </Field>
      <Field label="Server name" description="Name to verify the server's certificate against, if not the URL's host.">
        <Input
          id={`${id}-server-name`}
          value={b.tlsServerName ?? ''}
          placeholder="The URL's host"
          onChange={(e) => set({ tlsServerName: e.currentTarget.value })}
        />
      </Field>
      <Field label="With CA certificate" description="Verify the server against this CA instead of the system's.">
        <Switch
          id={`${id}-with-ca`}
          value={!!b.tlsWithCACert}
          onChange={(e) => set({ tlsWithCACert: e.currentTarget.checked })}
        />
      </Field>
      {b.tlsWithCACert && secret('CA certificate', SecretKey.TlsCACert, { placeholder: '-----BEGIN CERTIFICATE-----' })}
      <Field label="Client authentication" description="Present a client certificate (mutual TLS).">
        <Switch
          id={`${id}-client-auth`}
          value={!!b.tlsClientAuth}
          onChange={(e) => set({ tlsClientAuth: e.currentTarget.checked })}
        />
      </Field>
      {b.tlsClientAuth && (
        <>
          {secret('Client certificate', SecretKey.TlsClientCert, { placeholder: '-----BEGIN CERTIFICATE-----' })}
          {secret('Client key', SecretKey.TlsClientKey, { placeholder: '-----BEGIN PRIVATE KEY-----' })}
        </>
      )}
    </FieldSet>
  );
}

interface SecretFieldProps extends SectionProps {
  label: string;
  /** secureJsonData key */
  name: string;
  id: string;
  multiline?: { placeholder: string };
}

function SecretField({ label, name, id, multiline, options, onOptionsChange }: SecretFieldProps) {
  const common = {
    id,
    isConfigured: !!options.secureJsonFields?.[name],
    value: options.secureJsonData?.[name] ?? '',
    onReset: () => onOptionsChange(resetSecret(options, name)),
  };
  return (
    <Field label={label}>
      {multiline ? (
        <SecretTextArea
          {...common}
          rows={5}
          placeholder={multiline.placeholder}
          onChange={(e) => onOptionsChange(setSecret(options, name, e.currentTarget.value))}
        />
      ) : (
        <SecretInput
          {...common}
          onChange={(e) => onOptionsChange(setSecret(options, name, e.currentTarget.value))}
        />
      )}
    </Field>
  );
}
