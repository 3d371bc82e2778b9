// The settings page's "Query limits" and "Findings thresholds": what one
// query may ask of the backends, and the shares findings are judged by.
// Empty fields are unset (their keys removed), so the backend's defaults
// apply; shares are typed as percentages and stored as ratios, and the
// straggler threshold, a ratio to the median, is typed as it is stored.
import React, { useEffect, useId, useState } from 'react';

import { Field, FieldSet, Input } from '@grafana/ui';

import {
  BACKEND_DEFAULTS,
  LimitKey,
  Settings,
  ThresholdKey,
  isRatioThreshold,
  parseMaxQueryLength,
  parsePositiveInt,
  parseThreshold,
  setLimit,
  setThreshold,
  thresholdErrors,
  thresholdText,
} from './config';

interface Props {
  options: Settings;
  onOptionsChange: (options: Settings) => void;
  /** Told whether any field holds what the backend would refuse, so that Save can be blocked. */
  onInvalidChange: (invalid: boolean) => void;
}

const limits: Array<{ key: LimitKey; label: string; description: string; error: string; numeric: boolean }> = [
  {
    key: 'pyroscopeMaxQueryLength',
    label: 'Pyroscope max query length',
    description: `Pyroscope's max_query_length: longer ranges are queried in chunks of it. A duration such as 24h, 1d or 1h30m (units ms, s, m, h, d, w, y, largest first). Default ${BACKEND_DEFAULTS.pyroscopeMaxQueryLength}.`,
    error: 'Must be a duration of at least 1s, such as 24h, 1d or 1h30m',
    numeric: false,
  },
  {
    key: 'maxConcurrentCalls',
    label: 'Max concurrent calls',
    description: `Backend calls one query has in flight at once. Default ${BACKEND_DEFAULTS.maxConcurrentCalls}.`,
    error: 'Must be a whole number greater than 0',
    numeric: true,
  },
  {
    key: 'maxCallsPerQuery',
    label: 'Max calls per query',
    description: `Pyroscope calls one query may make (the filter's selectors × time chunks); a query that needs more fails with a message saying so. Default ${BACKEND_DEFAULTS.maxCallsPerQuery}.`,
    error: 'Must be a whole number greater than 0',
    numeric: true,
  },
];

const thresholds: Array<{ key: ThresholdKey; label: string; description: string }> = [
  {
    key: 'cpuEfficiencyBelow',
    label: 'CPU efficiency below (%)',
    description: 'Cores used over cores allocated below this is a cpuUnderused finding.',
  },
  {
    key: 'memoryUsedBelow',
    label: 'Memory used below (%)',
    description: "Peak memory over the job's limit below this is a memoryOverRequested finding. Must be under memory used above.",
  },
  {
    key: 'memoryUsedAbove',
    label: 'Memory used above (%)',
    description: "Peak memory over the job's limit at or above this is a memoryNearLimit finding.",
  },
  {
    key: 'gpuIdleBelow',
    label: 'GPU idle below (%)',
    description: "An allocated GPU whose highest utilisation stayed below this is a gpuIdle finding.",
  },
  {
    key: 'gpuMemoryUsedBelow',
    label: 'GPU memory used below (%)',
    description: "The job's peak device memory over the device's, on its fullest GPU, below this is a gpuMemoryUnderused finding.",
  },
  {
    key: 'gpuUtilizationBelow',
    label: 'GPU utilization below (%)',
    description: "Busy GPUs' mean utilisation below this, while CPU efficiency is at or above CPU saturated above, is an inputBound finding.",
  },
  {
    key: 'cpuSaturatedAbove',
    label: 'CPU saturated above (%)',
    description: 'CPU efficiency at or above this, with GPUs under GPU utilization below, is an inputBound finding.',
  },
  {
    key: 'stragglerAbove',
    label: 'Straggler above (× the median)',
    description:
      "A rank of a multi-rank job whose time in one of the job's top functions is more than this many times the median rank's there is a straggler finding. A ratio above 1.",
  },
];

/** A threshold's default as its field shows it, with its unit. */
function defaultText(key: ThresholdKey): string {
  return thresholdText(key, BACKEND_DEFAULTS.findings[key]) + (isRatioThreshold(key) ? '×' : '%');
}

function parseLimit(key: LimitKey, text: string): string | number | undefined | null {
  return key === 'pyroscopeMaxQueryLength' ? parseMaxQueryLength(text) : parsePositiveInt(text);
}

export function LimitsSection({ options, onOptionsChange, onInvalidChange }: Props) {
  const id = useId();
  const { jsonData } = options;
  // The fields' own text, so that an invalid entry stays visible (and is not stored).
  // 0 is the backend's "unset", shown as empty.
  const [limitTexts, setLimitTexts] = useState<Record<LimitKey, string>>(() => ({
    pyroscopeMaxQueryLength: jsonData.pyroscopeMaxQueryLength ?? '',
    maxConcurrentCalls: jsonData.maxConcurrentCalls ? String(jsonData.maxConcurrentCalls) : '',
    maxCallsPerQuery: jsonData.maxCallsPerQuery ? String(jsonData.maxCallsPerQuery) : '',
  }));
  const [thresholdTexts, setThresholdTexts] = useState<Partial<Record<ThresholdKey, string>>>(() =>
    Object.fromEntries(thresholds.map(({ key }) => [key, thresholdText(key, jsonData.findings?.[key] || undefined)]))
  );

  const limitInvalid = (key: LimitKey) => parseLimit(key, limitTexts[key]) === null;
  const tErrors = thresholdErrors(thresholdTexts);
  const invalid = limits.some(({ key }) => limitInvalid(key)) || Object.keys(tErrors).length > 0;
  useEffect(() => onInvalidChange(invalid), [invalid, onInvalidChange]);

  const onLimit = (key: LimitKey, text: string) => {
    setLimitTexts((t) => ({ ...t, [key]: text }));
    const v = parseLimit(key, text);
    if (v !== null) {
      onOptionsChange(setLimit(options, key, v));
    }
  };
  const onThreshold = (key: ThresholdKey, text: string) => {
    setThresholdTexts((t) => ({ ...t, [key]: text }));
    const v = parseThreshold(key, text);
    if (v !== null) {
      onOptionsChange(setThreshold(options, key, v));
    }
  };

  return (
    <>
      <FieldSet label="Query limits">
        {limits.map(({ key, label, description, error, numeric }) => (
          <Field key={key} label={label} description={description} invalid={limitInvalid(key)} error={error}>
            <Input
              id={`${id}-${key}`}
              inputMode={numeric ? 'numeric' : undefined}
              value={limitTexts[key]}
              placeholder={String(BACKEND_DEFAULTS[key])}
              onChange={(e) => onLimit(key, e.currentTarget.value)}
            />
          </Field>
        ))}
      </FieldSet>

      <FieldSet label="Findings thresholds">
        {thresholds.map(({ key, label, description }) => (
          <Field
            key={key}
            label={label}
            description={`${description} Default ${defaultText(key)}.`}
            invalid={!!tErrors[key]}
            error={tErrors[key]}
          >
            <Input
              id={`${id}-${key}`}
              inputMode="decimal"
              value={thresholdTexts[key] ?? ''}
              placeholder={thresholdText(key, BACKEND_DEFAULTS.findings[key])}
              onChange={(e) => onThreshold(key, e.currentTarget.value)}
            />
          </Field>
        ))}
      </FieldSet>
    </>
  );
}
