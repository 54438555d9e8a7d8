/* kg_protocol_dump.c: prints the C side of KernelGym's wire contract as one
 * JSON object, for tests/unit/test_kg_protocol.py to compare with the
 * harness's env/harness/protocol.py:
 *   "options"  the options object of a default eval job, as kg_job_to_json
 *              sends it (env/job.c's defaults)
 *   "ranges"   {option: [lo, hi]}, env/job.c's option ranges
 *   "statuses" the result statuses a result may carry (env/result.c), in
 *              enum order; "pending" is the C side's own "no result yet" and
 *              never on the wire, so it is left out
 *   "correct_rules" the values of the result's correct_rule (env/result.c)
 * Every value is read from the C tables, none is written here. */
#include <stdio.h>
#include <stdlib.h>

#include <cjson/cJSON.h>

#include "env/job.h"
#include "env/result.h"

int main(void) {
    kg_job job;
    kg_job_init(&job);
    job.task_source = "";
    job.candidate_source = "";
    cJSON *wire;
    if (kg_job_to_json(&job, "protocol", NULL, &wire) != DK_OK) {
        fprintf(stderr, "kg_protocol_dump: %s\n", dk_error());
        return 1;
    }
    cJSON *out = cJSON_CreateObject();
    cJSON_AddItemToObject(out, "options", cJSON_DetachItemFromObject(wire, "options"));
    cJSON_Delete(wire);
    cJSON *ranges = cJSON_AddObjectToObject(out, "ranges");
    for (int i = 0; i < kg_job_n_option_ranges; i++) {
        const double lh[2] = {kg_job_option_ranges[i].lo, kg_job_option_ranges[i].hi};
        cJSON_AddItemToObject(ranges, kg_job_option_ranges[i].name, cJSON_CreateDoubleArray(lh, 2));
    }
    cJSON *st = cJSON_AddArrayToObject(out, "statuses");
    for (int s = KG_STATUS_PENDING + 1; s < KG_STATUS_COUNT; s++)
        cJSON_AddItemToArray(st, cJSON_CreateString(kg_status_name((kg_status)s)));
    cJSON *rules = cJSON_AddArrayToObject(out, "correct_rules");
    for (int c = 0; c < KG_RULE_COUNT; c++)
        cJSON_AddItemToArray(rules, cJSON_CreateString(kg_correct_rule_name((kg_correct_rule)c)));
    char *text = cJSON_Print(out);
    printf("%s\n", text);
    free(text);
    cJSON_Delete(out);
    return 0;
}
