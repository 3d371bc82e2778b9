import { InlineField, InlineFieldRow, Input } from '@grafana/ui';
import React, { useState } from 'react';

import { DEFAULT_MAX_NODES, MAX_MAX_NODES } from '../../types';
import { LABEL_WIDTH, ProfileTypeField, SubEditorProps } from './fields';

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

/** flamegraph: a profile type and the graph's node budget. */
export function FlamegraphEditor(props: SubEditorProps) {
  const { query, update } = props;
  const [text, setText] = useState(query.maxNodes ? String(query.maxNodes) : '');
  const maxNodes = text === '' ? undefined : Number(text);
  const invalid = maxNodesError(maxNodes);
  return (
    <InlineFieldRow>
      <ProfileTypeField {...props} />
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
    </InlineFieldRow>
  );
}
