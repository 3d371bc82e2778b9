import { QueryEditorProps } from '@grafana/data';
import { InlineField, InlineFieldRow, RadioButtonGroup, Stack } from '@grafana/ui';
import React from 'react';

import type { DataSource } from '../datasource';
import { DEFAULT_QUERY_TYPE, queryTypeOptions, SlurmOptions, SlurmQuery } from '../types';
import { FilterField } from './FilterField';
import { editors } from './query/editors.gen';
import { LABEL_WIDTH } from './query/fields';

export type Props = QueryEditorProps<DataSource, SlurmQuery, SlurmOptions>;

export function QueryEditor({ query, onChange, onRunQuery, datasource, range }: Props) {
  const queryType = query.queryType ?? DEFAULT_QUERY_TYPE;
  // The fields of each query type, below the type and the filter they all have.
  const TypeEditor = editors[queryType] ?? editors[DEFAULT_QUERY_TYPE];

  const update = (patch: Partial<SlurmQuery>, run = true) => {
    onChange({ ...query, ...patch });
    if (run) {
      onRunQuery();
    }
  };

  return (
    <Stack direction="column" gap={1}>
      <InlineFieldRow>
        <InlineField label="Query type" labelWidth={LABEL_WIDTH}>
          <RadioButtonGroup options={queryTypeOptions} value={queryType} onChange={(v) => update({ queryType: v })} size="sm" />
        </InlineField>
      </InlineFieldRow>
      <InlineFieldRow>
        <InlineField
          label="Filter"
          labelWidth={LABEL_WIDTH}
          grow
          tooltip="CEL over the SLURM attributes: ==, !=, in [...], matches(), startsWith(), endsWith(), contains(), &&, ||, !. Dashboard variables ($job, $user) are inserted as escaped literals; a multi-value variable after == becomes in [...]. Ctrl+Space suggests, Shift+Enter runs."
        >
          <FilterField
            value={query.filter ?? ''}
            onChange={(filter) => onChange({ ...query, filter })}
            onRun={onRunQuery}
            backend={datasource}
            range={range}
          />
        </InlineField>
      </InlineFieldRow>
      {/* keyed by type: switching types starts that editor afresh */}
      <TypeEditor key={queryType} query={query} update={update} datasource={datasource} range={range} />
    </Stack>
  );
}
