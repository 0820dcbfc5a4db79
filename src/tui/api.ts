// The console's HTTP edge: JSON requests to /admin/v1 with the API key. Until the shared
// cubectl client lands this is the one place the console speaks HTTP (watch.ts streams).

export interface ApiTarget {
  baseUrl: string;
  apiKey: string;
}

/** An error answer of the admin API ({code, message}) or a transport failure (code 0). */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: number,
    message: string,
    readonly body?: unknown,
  ) {
    super(message);
    this.name = 'ApiError';
  }
}

export function authHeaders(t: ApiTarget): Record<string, string> {
  return t.apiKey ? { 'x-api-key': t.apiKey } : {};
}

export async function request<T>(t: ApiTarget, method: string, path: string, body?: unknown, timeoutMs = 15_000): Promise<T> {
  let res: Response;
  try {
    res = await fetch(new URL(path, t.baseUrl), {
      method,
      headers: { ...authHeaders(t), ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? null : JSON.stringify(body),
      signal: AbortSignal.timeout(timeoutMs),
    });
  } catch (e) {
    const cause = (e as { cause?: { code?: string } }).cause?.code;
    throw new ApiError(0, 0, `${method} ${path}: ${cause ?? (e as Error).message}`);
  }
  const text = await res.text();
  const parsed: unknown = text ? safeJson(text) : undefined;
  if (!res.ok) {
    const b = parsed as { code?: number; message?: string } | undefined;
    throw new ApiError(res.status, typeof b?.code === 'number' ? b.code : res.status, b?.message ?? `${method} ${path}: HTTP ${res.status}`, parsed);
  }
  return parsed as T;
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}
