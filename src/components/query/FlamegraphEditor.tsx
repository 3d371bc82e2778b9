import { InlineFieldRow } from '@grafana/ui';
import React from 'react';

import { MaxNodesField, ProfileTypeField, SubEditorProps } from './fields';

export { maxNodesError } from './fields';

/** flamegraph: a profile type and the graph's node budget. */
export function FlamegraphEditor(props: SubEditorProps) {
  return (
    <InlineFieldRow>
      <ProfileTypeField {...props} />
      <MaxNodesField {...props} />
    </InlineFieldRow>
  );
}
