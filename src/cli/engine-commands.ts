import { InvalidArgumentError, Option, type Command } from 'commander';
import { parseListen } from '../config/load-toml.js';
import { runServer } from './run-server.js';

interface SimFlags {
  listen: { host: string; port: number };
  ttftMs: number;
  tokenDelayMs: number;
  tokens: number;
  model: string;
  maxModelLen: number;
}

/** `svc-serving engine sim --listen HOST:PORT [--ttft-ms N] [--token-delay-ms N] [--tokens N] [--model NAME] [--max-model-len N]`. */
export function registerEngineCommands(program: Command): void {
  const engine = program.command('engine').description('inference engine helpers');
  engine
    .command('sim')
    .description(
      'an OpenAI-compatible engine stand-in with controllable timing (per-request sim:key=value directives in the prompt)',
    )
    .addOption(
      new Option('--listen <host:port>', 'address to listen on (port 0 picks a free port)')
        .argParser(parseListenOption)
        .default(parseListen('127.0.0.1:8001', 'engine sim'), '127.0.0.1:8001'),
    )
    .option('--ttft-ms <n>', 'milliseconds before the first token', integer(0), 50)
    .option('--token-delay-ms <n>', 'milliseconds between tokens (0: all at once)', integer(0), 10)
    .option('--tokens <n>', 'tokens per completion', integer(0), 32)
    .option('--model <name>', 'the one served model name', modelName, 'sim-model')
    .option(
      '--max-model-len <n>',
      'context length: prompt + max_tokens, and each embeddings input or rerank query+document, are checked against it',
      integer(1),
      8192,
    )
    .addHelpText('after', DIRECTIVES_HELP)
    .action(async (flags: SimFlags) => {
      await runServer('engine sim', async (logger) =>
        (await import('../engine-sim/engine-sim.js')).startEngineSim({
          host: flags.listen.host,
          port: flags.listen.port,
          logger,
          ttftMs: flags.ttftMs,
          tokenDelayMs: flags.tokenDelayMs,
          tokens: flags.tokens,
          model: flags.model,
          maxModelLen: flags.maxModelLen,
        }),
      );
    });
}

const DIRECTIVES_HELP = `
Directives: words of the last user message (chat), the prompt (completions) or the input (responses:
a string, or the last user message) change one request; on responses max_output_tokens is the limit,
a "length" finish is status "incomplete" (reason max_output_tokens), another finish word other than
stop, tool_calls and cancelled is "incomplete" with that reason, and error_after is vLLM's error event
(buffered: a Response with status "failed"):
  sim:ttft_ms=N          milliseconds before the first token
  sim:token_delay_ms=N   milliseconds between tokens (0: in bursts, as fast as the client reads)
  sim:tokens=N           tokens in the answer (at most 1000000; max_tokens, or without it what the
                         context leaves after the prompt, still caps it: finish "length")
  sim:finish=WORD        the finish_reason sent, verbatim (tool_calls: the answer is a tool call)
  sim:usage=off          no usage member, even with stream_options.include_usage
  sim:fail_after=N       when N < the answer's tokens: the connection is cut after N tokens
                         (streaming: no [DONE]; buffered: no answer)
  sim:error_after=N      when N < the answer's tokens: streaming, an error event after N tokens,
                         then [DONE] (vLLM's way); buffered, status 200 with an error body
  sim:reasoning=N        chat, responses (not with finish=tool_calls): N reasoning fragments first,
                         counted within max_tokens (a budget they use up: finish "length")
  sim:status=NNN         answer with that error status (400-599) and an OpenAI-style error body
  sim:reject=context     a vLLM-style context-length rejection (400, OpenAI's error envelope,
                         as vLLM answers since 0.10.1); reject=context_flat: the flat
                         {"object":"error",...} body older vLLM answered
Values are whole numbers of at most 9 digits; malformed values and unknown keys are ignored.
A buffered answer arrives when its last token would have (reasoning tokens and the tokens
before an error included).
Health: GET /health answers 200 (503 when unhealthy); from loopback, POST /sim/health with
{"ok": false, "delay_ms": 2000} makes it fail or answer slowly (e.g. to test the router's readiness check);
"fail_status": 503 (500-599; 0 turns it off) makes every inference request answer that status.`;

// Parsers throw InvalidArgumentError so main.ts turns them into its fixed usage line and exit 2.
function parseListenOption(value: string): { host: string; port: number } {
  try {
    return parseListen(value, 'engine sim');
  } catch {
    throw new InvalidArgumentError('expected HOST:PORT');
  }
}

function integer(min: number): (value: string) => number {
  return (value) => {
    const n = /^[0-9]{1,9}$/.test(value) ? Number(value) : Number.NaN;
    if (!(n >= min)) throw new InvalidArgumentError(`expected an integer of at least ${min}`);
    return n;
  };
}

function modelName(value: string): string {
  if (!/^[A-Za-z0-9._:/@-]{1,256}$/.test(value)) throw new InvalidArgumentError('expected a model name');
  return value;
}
