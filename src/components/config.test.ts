import {
  Settings,
  isHttpUrl,
  normalizeList,
  parseTimeout,
  resetSecret,
  setBackend,
  setOwnership,
  setSecret,
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

describe('parseTimeout', () => {
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
    expect(parseTimeout(text)).toBe(want);
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
