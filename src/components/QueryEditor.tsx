import { QueryEditorProps } from '@grafana/data';
import { InlineField, InlineFieldRow, RadioButtonGroup, Stack } from '@grafana/ui';
import React, { ComponentType } from 'react';

import type { DataSource } from '../datasource';
import { QueryType, QueryTypeValue, queryTypeOptions, SlurmOptions, SlurmQuery } from '../types';
import { FilterField } from './FilterField';
import { AttributeValuesEditor } from './query/AttributeValuesEditor';
import { LABEL_WIDTH, SubEditorProps } from './query/fields';
import { FindingsEditor } from './query/FindingsEditor';
import { FlamegraphEditor } from './query/FlamegraphEditor';
import { GPUMetricEditor } from './query/GPUMetricEditor';
import { ProfileSeriesEditor } from './query/ProfileSeriesEditor';
import { TopEntitiesEditor } from './query/TopEntitiesEditor';

export type Props = QueryEditorProps<DataSource, SlurmQuery, SlurmOptions>;

/** The fields of each query type, below the type and the filter they all have. */
const editors: Record<QueryTypeValue, ComponentType<SubEditorProps>> = {
  [QueryType.Flamegraph]: FlamegraphEditor,
  [QueryType.ProfileSeries]: ProfileSeriesEditor,
  [QueryType.GPUMetric]: GPUMetricEditor,
  [QueryType.TopEntities]: TopEntitiesEditor,
  [QueryType.AttributeValues]: AttributeValuesEditor,
  [QueryType.Findings]: FindingsEditor,
};

export function QueryEditor({ query, onChange, onRunQuery, datasource, range }: Props) {
  const queryType = query.queryType ?? QueryType.Flamegraph;
  const TypeEditor = editors[queryType] ?? FlamegraphEditor;

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
