// A JSON request body of the admin API checked with zod: 400 naming each field at fault.
import type { IncomingMessage } from 'node:http';
import type { z } from 'zod';
import { CubeError } from '../../errors.js';
import { readJson } from '../../http.js';

export async function body<T>(req: IncomingMessage, schema: z.ZodType<T>): Promise<T> {
  const r = schema.safeParse(await readJson(req));
  if (!r.success) throw new CubeError('BAD_REQUEST', r.error.issues.map((i) => `${i.path.join('.') || 'body'}: ${i.message}`).join('; '));
  return r.data;
}
