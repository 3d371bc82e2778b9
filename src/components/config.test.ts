import {
  Settings,
  isHttpUrl,
  normalizeList,
  parseDurationMs,
  parseMaxQueryLength,
  parsePercent,
  parsePositiveInt,
  parseRatio,
  parseThreshold,
  percentText,
  resetSecret,
  setBackend,
  setLimit,
  setOwnership,
  setSecret,
  setThreshold,
  thresholdErrors,
  thresholdText,
  urlError,
} from './config';

const opts = (over: Partial<Settings> = {}) =>
  ({ url: '', jsonData: {}, secureJsonFields: {}, ...over }) as unknown as Settings;

describe('isHttpUrl / urlError', () => {
  it.each([
    ['http://pyroscope:4040', true],
    ['https://prom.example/api/prom', true],
    [' http://x ', true],
    ['pyroscope:4040', false],
    ['ftp://x', false],
    ['http://', false],
    ['', false],
    ['/relative', false],
  ])('%j -> %s', (url, ok) => {
    expect(isHttpUrl(url)).toBe(ok);
  });

  it('requires a URL only when asked', () => {
    expect(urlError('', true)).toMatch(/required/);
    expect(urlError(undefined, false)).toBeUndefined();
    expect(urlError('x', false)).toMatch(/http:\/\/ or https:\/\//);
    expect(urlError('http://a', true)).toBeUndefined();
  });
});

describe('parsePositiveInt', () => {
  it.each([
    ['', undefined],
    ['  ', undefined],
    ['30', 30],
    [' 7 ', 7],
    ['0', null],
    ['-1', null],
    ['1.5', null],
    ['1e3', null],
    ['abc', null],
    ['99999999999999999999', null],
  ])('%j -> %s', (text, want) => {
    expect(parsePositiveInt(text)).toBe(want);
  });
});

describe('parseDurationMs', () => {
  // Each as Go's model.ParseDuration (prometheus/common v0.73.1) answers it.
  it.each([
    ['24h', 86400000],
    ['1d', 86400000],
    ['90m', 5400000],
    ['1h30m', 5400000],
    ['01h', 3600000],
    ['1y2w3d4h5m6s7ms', 33019506007],
    ['0', 0],
    ['0s', 0],
    ['500ms', 500],
    ['292y', 9208512000000],
    // time.Duration's largest, 2^63-1 ns, and a millisecond more.
    ['9223372036854ms', 9223372036854],
    ['106751d23h47m16s854ms', 9223372036854],
    ['106751d23h47m16s855ms', null],
    ['9223372036855ms', null],
    ['293y', null],
    ['99999999999999999999999s', null],
    ['', null],
    ['00', null],
    ['1', null],
    ['h', null],
    ['1m1h', null],
    ['1h1h', null],
    ['1.5h', null],
    ['-1h', null],
    ['1H', null],
    ['1mo', null],
    ['24 h', null],
    ['1h ', null],
    [' 1h', null],
  ])('%j -> %s', (s, want) => {
    expect(parseDurationMs(s)).toBe(want);
  });
});

describe('parseMaxQueryLength', () => {
  it.each([
    ['', undefined],
    ['  ', undefined],
    ['24h', '24h'],
    [' 1d ', '1d'],
    ['1h30m', '1h30m'],
    ['1s', '1s'],
    // settings.go refuses a length under a second; 0 is not stored.
    ['999ms', null],
    ['0', null],
    ['0s', null],
    ['24', null],
    ['1m1h', null],
  ])('%j -> %s', (text, want) => {
    expect(parseMaxQueryLength(text)).toBe(want);
  });
});

describe('parsePercent / percentText', () => {
  it.each([
    ['', undefined],
    ['50', 0.5],
    [' 29 ', 0.29],
    ['12.5', 0.125],
    ['0.1', 0.001],
    ['.5', 0.005],
    ['7.', 0.07],
    ['100', 1],
    ['0', null],
    ['0.0', null],
    ['100.01', null],
    ['-5', null],
    ['1e1', null],
    ['5%', null],
    ['1,5', null],
    ['abc', null],
  ])('%j -> %s', (text, want) => {
    expect(parsePercent(text)).toBe(want);
  });

  it.each([
    [undefined, ''],
    [0.29, '29'],
    [0.125, '12.5'],
    [0.01, '1'],
    [0.001, '0.1'],
    [1, '100'],
    [1.5, '150'],
  ])('%s shows as %j', (ratio, want) => {
    expect(percentText(ratio)).toBe(want);
  });
});

describe('thresholdErrors', () => {
  it('accepts empty and in-range fields', () => {
    expect(thresholdErrors({})).toEqual({});
    expect(thresholdErrors({ cpuEfficiencyBelow: '', gpuIdleBelow: '5', memoryUsedAbove: '100' })).toEqual({});
  });

  it('flags each share out of (0, 100]', () => {
    expect(thresholdErrors({ gpuIdleBelow: '0', cpuSaturatedAbove: '101', memoryUsedAbove: 'x' })).toEqual({
      gpuIdleBelow: 'Must be a percentage above 0 and at most 100',
      cpuSaturatedAbove: 'Must be a percentage above 0 and at most 100',
      memoryUsedAbove: 'Must be a percentage above 0 and at most 100',
    });
  });

  it('wants memory used below under memory used above, an unset one at its default (25%, 90%)', () => {
    expect(thresholdErrors({ memoryUsedBelow: '50', memoryUsedAbove: '60' })).toEqual({});
    expect(thresholdErrors({ memoryUsedBelow: '60', memoryUsedAbove: '60' })).toEqual({
      memoryUsedBelow: 'Must be under "memory used above" (60%)',
      memoryUsedAbove: 'Must be over "memory used below" (60%)',
    });
    expect(thresholdErrors({ memoryUsedBelow: '95' })).toEqual({
      memoryUsedBelow: 'Must be under "memory used above" (90%)',
      memoryUsedAbove: 'Must be over "memory used below" (95%)',
    });
    expect(thresholdErrors({ memoryUsedAbove: '20' })).toEqual({
      memoryUsedBelow: 'Must be under "memory used above" (20%)',
      memoryUsedAbove: 'Must be over "memory used below" (25%)',
    });
    // An invalid field is its own error, not the pair's.
    expect(thresholdErrors({ memoryUsedBelow: '0', memoryUsedAbove: '20' })).toEqual({
      memoryUsedBelow: 'Must be a percentage above 0 and at most 100',
    });
  });

  it('takes the straggler threshold as a ratio above 1, not a percentage', () => {
    expect(thresholdErrors({ stragglerAbove: '1.5', cpuEfficiencyBelow: '50' })).toEqual({});
    expect(thresholdErrors({ stragglerAbove: '150' })).toEqual({ stragglerAbove: 'Must be a ratio above 1 and at most 100' });
    expect(thresholdErrors({ stragglerAbove: '1' })).toEqual({ stragglerAbove: 'Must be a ratio above 1 and at most 100' });
  });
});

describe('ratio thresholds', () => {
  it.each([
    ['', undefined],
    ['1.5', 1.5],
    [' 2 ', 2],
    ['100', 100],
    ['1', null],
    ['0.5', null],
    ['101', null],
    ['1,5', null],
  ])('parseRatio(%j) is %p', (text, want) => {
    expect(parseRatio(text)).toBe(want);
  });

  it('reads and shows each threshold as its field is typed', () => {
    expect(parseThreshold('stragglerAbove', '2')).toBe(2);
    expect(parseThreshold('gpuIdleBelow', '2')).toBe(0.02);
    expect(thresholdText('stragglerAbove', 1.5)).toBe('1.5');
    expect(thresholdText('gpuIdleBelow', 0.05)).toBe('5');
    expect(thresholdText('stragglerAbove', undefined)).toBe('');
  });
});

describe('normalizeList', () => {
  it('trims, drops empty entries and duplicates, keeping order', () => {
    expect(normalizeList([' b ', 'a', '', '  ', 'b', 'a '])).toEqual(['b', 'a']);
  });
});

describe('updates', () => {
  it('setBackend patches one backend and leaves the rest alone', () => {
    const o = opts({ jsonData: { tenantId: 't', pyroscope: { url: 'http://p' }, prometheus: { url: 'http://m' } } });
    const n = setBackend(o, 'pyroscope', { auth: 'bearer' });
    expect(n.jsonData).toEqual({ tenantId: 't', pyroscope: { url: 'http://p', auth: 'bearer' }, prometheus: { url: 'http://m' } });
    expect(n.jsonData.prometheus).toBe(o.jsonData.prometheus);
    expect(o.jsonData.pyroscope).toEqual({ url: 'http://p' });
  });

  it('setOwnership merges into jobOwnership', () => {
    const o = opts({ jsonData: { jobOwnership: { enabled: true, allowUsers: ['a'] } } });
    expect(setOwnership(o, { allowTeams: ['t'] }).jsonData.jobOwnership).toEqual({
      enabled: true,
      allowUsers: ['a'],
      allowTeams: ['t'],
    });
  });

  it('setLimit sets a key, and removes it for undefined', () => {
    const o = opts({ jsonData: { tenantId: 't', maxCallsPerQuery: 5 } });
    expect(setLimit(o, 'pyroscopeMaxQueryLength', '1d').jsonData).toEqual({
      tenantId: 't',
      maxCallsPerQuery: 5,
      pyroscopeMaxQueryLength: '1d',
    });
    const n = setLimit(o, 'maxCallsPerQuery', undefined);
    expect(n.jsonData).toEqual({ tenantId: 't' });
    expect('maxCallsPerQuery' in n.jsonData).toBe(false);
    expect(o.jsonData.maxCallsPerQuery).toBe(5);
  });

  it('setThreshold merges into findings and drops findings when the last one goes', () => {
    const o = opts({ jsonData: { findings: { gpuIdleBelow: 0.05 } } });
    const n = setThreshold(o, 'cpuEfficiencyBelow', 0.4);
    expect(n.jsonData).toEqual({ findings: { gpuIdleBelow: 0.05, cpuEfficiencyBelow: 0.4 } });
    expect(setThreshold(n, 'gpuIdleBelow', undefined).jsonData).toEqual({ findings: { cpuEfficiencyBelow: 0.4 } });
    expect(setThreshold(o, 'gpuIdleBelow', undefined).jsonData).toEqual({});
    expect(o.jsonData.findings).toEqual({ gpuIdleBelow: 0.05 });
  });

  it('setSecret and resetSecret touch only secureJsonData / secureJsonFields', () => {
    const o = opts({ secureJsonFields: { a: true, b: true }, secureJsonData: { c: 'x' } });
    const s = setSecret(o, 'd', 'v');
    expect(s.secureJsonData).toEqual({ c: 'x', d: 'v' });
    expect(s.jsonData).toBe(o.jsonData);
    const r = resetSecret(o, 'a');
    expect(r.secureJsonFields).toEqual({ a: false, b: true });
    expect(r.secureJsonData).toEqual({ c: 'x', a: '' });
    expect(o.secureJsonFields).toEqual({ a: true, b: true });
  });
});
