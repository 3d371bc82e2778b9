// What the per-type query editors share: their props, and the fields more
// than one query type has (profile type, group by, max nodes).
import { SelectableValue, TimeRange } from '@grafana/data';
import { InlineField, Input, MultiSelect, Select } from '@grafana/ui';
import React, { useMemo, useState } from 'react';

import type { DataSource } from '../../datasource';
import { AttributeInfo, DEFAULT_MAX_NODES, MAX_MAX_NODES, SlurmQuery } from '../../types';
import { useLoaded } from '../useLoaded';

export const LABEL_WIDTH = 16;

/** What QueryEditor gives the editor of the query's type. */
export interface SubEditorProps {
  query: SlurmQuery;
  /** Merges patch into the query and, unless run is false, runs it. */
  update: (patch: Partial<SlurmQuery>, run?: boolean) => void;
  datasource: DataSource;
  range?: TimeRange;
}

/** The schema's attributes (cached by the datasource), as select options. */
export function useAttributeOptions(datasource: Pick<DataSource, 'attributes'>): Array<SelectableValue<string>> {
  const attributes = useLoaded<AttributeInfo>(() => datasource.attributes(), [datasource]);
  return useMemo(() => attributes.map((a) => ({ value: a.name, label: a.name, description: a.description })), [attributes]);
}

/** Pyroscope's profile types in the range; empty means the datasource's default. */
export function ProfileTypeField({ query, update, datasource, range }: SubEditorProps) {
  // Asked once per editor: the range changes on every refresh, profile
  // types rarely do.
  const profileTypes = useLoaded(() => datasource.profileTypes(range), [datasource]);
  const fallback = datasource.defaultProfileType();
  // What a type measures tells apart those of one profile (blocked and
  // runnable off-CPU time); the id is what the settings' default takes.
  const options: Array<SelectableValue<string>> = profileTypes.map((p) => ({
    value: p.id,
    label: p.name,
    description: p.description ? `${p.description} (${p.id})` : p.id,
  }));
  if (query.profileType && !profileTypes.some((p) => p.id === query.profileType)) {
    options.push({ value: query.profileType, label: query.profileType });
  }
  const fallbackName = profileTypes.find((p) => p.id === fallback)?.name ?? fallback;
  return (
    <InlineField
      label="Profile type"
      labelWidth={LABEL_WIDTH}
      tooltip="Empty: the datasource's default profile type (set in its settings; CPU time unless set there)"
    >
      <Select
        inputId="slurmscope-profile-type"
        aria-label="Profile type"
        width={48}
        options={options}
        value={query.profileType ?? null}
        isClearable
        allowCustomValue
        placeholder={fallbackName ? `default (${fallbackName})` : "the datasource's default"}
        onChange={(v) => update({ profileType: v?.value || undefined })}
      />
    </InlineField>
  );
}

export function GroupByField({ query, update, datasource }: SubEditorProps) {
  const attributeOptions = useAttributeOptions(datasource);
  return (
    <InlineField label="Group by" labelWidth={LABEL_WIDTH} tooltip="Without host.name, series are merged across nodes">
      <MultiSelect
        inputId="slurmscope-group-by"
        aria-label="Group by"
        width={60}
        options={attributeOptions}
        value={query.groupBy ?? []}
        onChange={(vs) => update({ groupBy: vs.map((v) => v.value!).filter(Boolean) })}
      />
    </InlineField>
  );
}

/** maxNodesError says why n is not a usable node budget, or undefined. */
export function maxNodesError(n: number | undefined): string | undefined {
  if (n === undefined) {
    return undefined;
  }
  if (!Number.isInteger(n) || n < 1 || n > MAX_MAX_NODES) {
    return `Max nodes must be a whole number from 1 to ${MAX_MAX_NODES}`;
  }
  return undefined;
}

/** The flame graph's node budget, stored when it leaves the field valid. */
export function MaxNodesField({ query, update }: SubEditorProps) {
  const [text, setText] = useState(query.maxNodes ? String(query.maxNodes) : '');
  const maxNodes = text === '' ? undefined : Number(text);
  const invalid = maxNodesError(maxNodes);
  return (
    <InlineField
      label="Max nodes"
      labelWidth={LABEL_WIDTH}
      invalid={Boolean(invalid)}
      error={invalid}
      tooltip={`Flame graph node budget; the smallest are merged into "other". Default ${DEFAULT_MAX_NODES}.`}
    >
      <Input
        aria-label="Max nodes"
        type="number"
        width={14}
        min={1}
        max={MAX_MAX_NODES}
        placeholder={String(DEFAULT_MAX_NODES)}
        value={text}
        onChange={(e) => setText(e.currentTarget.value)}
        onBlur={() => {
          if (!maxNodesError(maxNodes)) {
            update({ maxNodes });
          }
        }}
      />
    </InlineField>
  );
}
