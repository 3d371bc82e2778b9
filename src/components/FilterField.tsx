// The CEL filter input: a textarea over a mirror of its text in which the
// backend's issues are underlined at their exact characters, with
// suggestions of attribute names and values from the backend's resources.
import { css, cx } from '@emotion/css';
import { GrafanaTheme2, TimeRange } from '@grafana/data';
import { useStyles2 } from '@grafana/ui';
import React, { KeyboardEvent, useCallback, useEffect, useId, useMemo, useRef, useState } from 'react';

import { completionAt, Completion, functions, indexOf, span } from '../cel';
import { escapeInside, maskVariables } from '../interpolate';
import type { AttributeInfo, FilterIssue, ValidateResult } from '../types';
import { useLoaded } from './useLoaded';

/** What the field needs from the datasource; DataSource implements it. */
export interface FilterBackend {
  attributes(): Promise<AttributeInfo[]>;
  values(attribute: string, filter: string, range?: TimeRange): Promise<string[]>;
  validate(filter: string): Promise<ValidateResult>;
}

export interface Props {
  value: string;
  onChange: (value: string) => void;
  /** Called on blur and on Shift+Enter / Ctrl+Enter. */
  onRun?: () => void;
  backend: FilterBackend;
  range?: TimeRange;
  placeholder?: string;
  /** ms of quiet before the backend validates what was typed */
  debounceMs?: number;
}

export interface Suggestion {
  label: string;
  insert: string;
  detail?: string;
}

interface Marked {
  from: number;
  to: number;
  issue: FilterIssue;
}

const MAX_SUGGESTIONS = 50;
const VALUES_TTL_MS = 30_000;

export function FilterField({ value, onChange, onRun, backend, range, placeholder, debounceMs = 300 }: Props) {
  const styles = useStyles2(getStyles);
  const id = useId();
  const area = useRef<HTMLTextAreaElement>(null);
  const mirror = useRef<HTMLDivElement>(null);
  const [issues, setIssues] = useState<{ text: string; issues: FilterIssue[] }>({ text: '', issues: [] });
  const [unavailable, setUnavailable] = useState<string>();
  const attributes = useLoaded<AttributeInfo>(() => backend.attributes(), [backend]);
  const [suggestions, setSuggestions] = useState<Suggestion[]>([]);
  const [completion, setCompletion] = useState<Completion>({ kind: 'none' });
  const [active, setActive] = useState(0);
  const seq = useRef(0);
  // What the last run saw: a blur that changed nothing runs nothing.
  const ran = useRef(value);
  const run = () => {
    ran.current = value;
    onRun?.();
  };
  const valueCache = useRef(new Map<string, { at: number; values: Promise<string[]> }>());

  // Validate what was typed, after a pause; only the newest answer counts.
  useEffect(() => {
    const mine = ++seq.current;
    if (value.trim() === '') {
      // Nothing to check; answers still on their way are dropped, and
      // nothing is shown for an empty filter (below).
      return;
    }
    const t = setTimeout(() => {
      // Dashboard variables are not CEL until the query interpolates them.
      backend
        .validate(maskVariables(value))
        .then((r) => {
          if (seq.current === mine) {
            setIssues({ text: value, issues: r.ok ? [] : (r.issues ?? []) });
            setUnavailable(undefined);
          }
        })
        .catch((e: unknown) => {
          if (seq.current === mine) {
            setUnavailable(errorMessage(e));
          }
        });
    }, debounceMs);
    return () => clearTimeout(t);
  }, [value, backend, debounceMs]);

  // Issues are drawn only over the text they were found in.
  const marked: Marked[] = useMemo(() => {
    if (issues.text !== value) {
      return [];
    }
    return issues.issues.map((issue) => {
      const at = indexOf(value, issue.line, issue.column);
      const [from, to] = span(value, at);
      return { from, to, issue };
    });
  }, [issues, value]);

  const values = useCallback(
    (attribute: string): Promise<string[]> => {
      // Values are kept for a short while: typing asks on every key.
      const hit = valueCache.current.get(attribute);
      if (hit && Date.now() - hit.at < VALUES_TTL_MS) {
        return hit.values;
      }
      const values = backend.values(attribute, '', range).catch(() => []);
      valueCache.current.set(attribute, { at: Date.now(), values });
      return values;
    },
    [backend, range]
  );

  const suggest = useCallback(
    (text: string, cursor: number) => {
      const c = completionAt(text, cursor);
      setCompletion(c);
      setActive(0);
      if (c.kind === 'attribute') {
        const names = attributes.map((a) => ({ label: a.name, insert: a.name, detail: a.description }));
        const fns = functions.map((f) => ({ label: f + '()', insert: f + '(', detail: 'function' }));
        const prefix = c.prefix.toLowerCase();
        setSuggestions(
          [...names, ...fns].filter((s) => s.label.toLowerCase().startsWith(prefix) && s.insert !== c.prefix).slice(0, MAX_SUGGESTIONS)
        );
      } else if (c.kind === 'value') {
        if (!attributes.some((a) => a.name === c.attribute)) {
          setSuggestions([]);
          return;
        }
        values(c.attribute).then((vs) => {
          // Still the same place? The user may have typed on.
          const now = area.current ? completionAt(area.current.value, area.current.selectionStart ?? 0) : c;
          if (now.kind !== 'value' || now.attribute !== c.attribute) {
            return;
          }
          const prefix = now.prefix;
          setSuggestions(
            vs
              .filter((v) => v.startsWith(prefix))
              .slice(0, MAX_SUGGESTIONS)
              .map((v) => ({
                label: v,
                insert: now.quoted ? escapeInside(v, now.quote) : '"' + escapeInside(v, '"') + '"',
              }))
          );
          setCompletion(now);
        });
      } else {
        setSuggestions([]);
      }
    },
    [attributes, values]
  );

  const accept = (s: Suggestion) => {
    const el = area.current;
    if (!el || completion.kind === 'none') {
      return;
    }
    let insert = s.insert;
    let to = completion.to;
    if (completion.kind === 'value' && completion.quoted) {
      // Close an unclosed literal.
      const closed = value[completion.to] === completion.quote;
      if (!closed) {
        insert += completion.quote;
      } else {
        to = completion.to + 1;
        insert += completion.quote;
      }
    }
    const next = value.slice(0, completion.from) + insert + value.slice(to);
    const caret = completion.from + insert.length;
    onChange(next);
    setSuggestions([]);
    setCompletion({ kind: 'none' });
    requestAnimationFrame(() => {
      el.focus();
      el.setSelectionRange(caret, caret);
    });
  };

  const onKeyDown = (e: KeyboardEvent<HTMLTextAreaElement>) => {
    const open = suggestions.length > 0;
    if (open && e.key === 'ArrowDown') {
      e.preventDefault();
      setActive((a) => (a + 1) % suggestions.length);
    } else if (open && e.key === 'ArrowUp') {
      e.preventDefault();
      setActive((a) => (a - 1 + suggestions.length) % suggestions.length);
    } else if (open && (e.key === 'Enter' || e.key === 'Tab') && !e.shiftKey && !e.ctrlKey && !e.metaKey) {
      e.preventDefault();
      accept(suggestions[Math.min(active, suggestions.length - 1)]);
    } else if (open && e.key === 'Escape') {
      e.preventDefault();
      setSuggestions([]);
    } else if (e.key === 'Enter' && (e.shiftKey || e.ctrlKey || e.metaKey)) {
      e.preventDefault();
      run();
    } else if (e.key === ' ' && e.ctrlKey) {
      e.preventDefault();
      suggest(value, e.currentTarget.selectionStart ?? value.length);
    }
  };

  const lines = Math.min(8, Math.max(1, value.split('\n').length));
  const listId = id + '-suggestions';

  return (
    <div className={styles.wrap}>
      <div className={styles.field}>
        <div ref={mirror} className={cx(styles.text, styles.mirror)} aria-hidden="true">
          {renderMirror(value, marked, styles.error)}
          {'\u200b'}
        </div>
        <textarea
          ref={area}
          data-testid="slurmscope-filter-input"
          aria-label="Filter"
          aria-invalid={marked.length > 0}
          aria-autocomplete="list"
          aria-controls={listId}
          aria-expanded={suggestions.length > 0}
          role="combobox"
          className={cx(styles.text, styles.input)}
          value={value}
          rows={lines}
          spellCheck={false}
          placeholder={placeholder ?? 'slurm.job.user == "bob" && matches(slurm.job.name, "train.*")'}
          onChange={(e) => {
            onChange(e.target.value);
            suggest(e.target.value, e.target.selectionStart ?? e.target.value.length);
          }}
          onKeyDown={onKeyDown}
          onScroll={(e) => {
            if (mirror.current) {
              mirror.current.scrollTop = e.currentTarget.scrollTop;
              mirror.current.scrollLeft = e.currentTarget.scrollLeft;
            }
          }}
          onBlur={() => {
            // Let a click on a suggestion land first.
            setTimeout(() => setSuggestions([]), 150);
            if (value !== ran.current) {
              run();
            }
          }}
        />
        {suggestions.length > 0 && (
          <ul id={listId} role="listbox" className={styles.suggestions} data-testid="slurmscope-filter-suggestions">
            {suggestions.map((s, i) => (
              <li
                key={s.label}
                role="option"
                aria-selected={i === active}
                className={cx(styles.suggestion, i === active && styles.activeSuggestion)}
                onMouseDown={(e) => {
                  e.preventDefault();
                  accept(s);
                }}
              >
                <span>{s.label}</span>
                {s.detail && <span className={styles.detail}>{s.detail}</span>}
              </li>
            ))}
          </ul>
        )}
      </div>
      {marked.length > 0 && (
        <ul className={styles.issues} data-testid="slurmscope-filter-issues" aria-live="polite">
          {marked.map((m, i) => (
            <li key={i}>
              <button
                type="button"
                className={styles.issueButton}
                onClick={() => {
                  area.current?.focus();
                  area.current?.setSelectionRange(m.from, m.to);
                }}
              >
                {m.issue.line}:{m.issue.column} {m.issue.message}
              </button>
            </li>
          ))}
        </ul>
      )}
      {unavailable && value.trim() !== '' && (
        <div className={styles.unavailable} data-testid="slurmscope-filter-unavailable">
          The filter could not be checked: {unavailable}
        </div>
      )}
    </div>
  );
}

// renderMirror lays the text out exactly as the textarea does, with each
// issue's characters wrapped in a marker.
function renderMirror(text: string, marked: Marked[], errorClass: string): React.ReactNode[] {
  const out: React.ReactNode[] = [];
  const sorted = [...marked].sort((a, b) => a.from - b.from);
  let at = 0;
  sorted.forEach((m, i) => {
    const from = Math.max(m.from, at);
    if (from > at) {
      out.push(text.slice(at, from));
    }
    const shown = text.slice(from, Math.max(from, m.to));
    out.push(
      <span
        key={i}
        className={errorClass}
        data-testid="slurmscope-filter-error"
        data-offset={m.from}
        data-line={m.issue.line}
        data-column={m.issue.column}
        title={m.issue.message}
      >
        {shown === '' ? '\u00a0' : shown}
      </span>
    );
    at = Math.max(at, m.to);
  });
  if (at < text.length) {
    out.push(text.slice(at));
  }
  return out;
}

function errorMessage(e: unknown): string {
  if (e && typeof e === 'object') {
    const o = e as { data?: { error?: string; message?: string }; message?: string; statusText?: string };
    return o.data?.error ?? o.data?.message ?? o.message ?? o.statusText ?? 'request failed';
  }
  return String(e);
}

const getStyles = (theme: GrafanaTheme2) => {
  const text = css({
    fontFamily: theme.typography.fontFamilyMonospace,
    fontSize: theme.typography.bodySmall.fontSize,
    lineHeight: '20px',
    padding: theme.spacing(0.75, 1),
    border: `1px solid transparent`,
    whiteSpace: 'pre-wrap',
    overflowWrap: 'anywhere',
    wordBreak: 'break-all',
    letterSpacing: 'normal',
    tabSize: 4,
    margin: 0,
    boxSizing: 'border-box',
    width: '100%',
  });
  return {
    wrap: css({ width: '100%', minWidth: 400 }),
    field: css({ position: 'relative', width: '100%' }),
    text,
    mirror: css({
      position: 'absolute',
      inset: 0,
      color: 'transparent',
      overflow: 'hidden',
      pointerEvents: 'none',
      background: theme.components.input.background,
      borderRadius: theme.shape.radius.default,
    }),
    input: css({
      position: 'relative',
      display: 'block',
      resize: 'vertical',
      background: 'transparent',
      color: theme.components.input.text,
      caretColor: theme.components.input.text,
      borderColor: theme.components.input.borderColor,
      borderRadius: theme.shape.radius.default,
      outline: 'none',
      '&:focus': { borderColor: theme.colors.primary.border },
      '&[aria-invalid="true"]': { borderColor: theme.colors.error.border },
      '&::placeholder': { color: theme.colors.text.disabled },
    }),
    error: css({
      textDecorationLine: 'underline',
      textDecorationStyle: 'wavy',
      textDecorationColor: theme.colors.error.main,
      textDecorationThickness: 2,
      textUnderlineOffset: 3,
      background: theme.colors.error.transparent,
    }),
    issues: css({
      listStyle: 'none',
      margin: theme.spacing(0.5, 0, 0),
      padding: 0,
      color: theme.colors.error.text,
      fontSize: theme.typography.bodySmall.fontSize,
    }),
    issueButton: css({
      background: 'none',
      border: 'none',
      padding: 0,
      color: 'inherit',
      font: 'inherit',
      cursor: 'pointer',
      textAlign: 'left',
    }),
    unavailable: css({ color: theme.colors.warning.text, fontSize: theme.typography.bodySmall.fontSize, marginTop: theme.spacing(0.5) }),
    suggestions: css({
      position: 'absolute',
      zIndex: theme.zIndex.dropdown,
      left: 0,
      top: '100%',
      minWidth: 280,
      maxHeight: 240,
      overflowY: 'auto',
      listStyle: 'none',
      margin: 0,
      padding: theme.spacing(0.5, 0),
      background: theme.colors.background.primary,
      border: `1px solid ${theme.colors.border.weak}`,
      boxShadow: theme.shadows.z3,
      borderRadius: theme.shape.radius.default,
    }),
    suggestion: css({
      display: 'flex',
      justifyContent: 'space-between',
      gap: theme.spacing(2),
      padding: theme.spacing(0.5, 1),
      cursor: 'pointer',
      fontFamily: theme.typography.fontFamilyMonospace,
      fontSize: theme.typography.bodySmall.fontSize,
    }),
    activeSuggestion: css({ background: theme.colors.action.hover }),
    detail: css({ color: theme.colors.text.secondary, fontFamily: theme.typography.fontFamily }),
  };
};
