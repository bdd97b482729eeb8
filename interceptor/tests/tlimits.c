/* tlimits: what the library reads from a claim's limits file, for the Python -> C contract test
 * (tests/integration/test_limits_contract.py feeds it files the node plugin rendered).
 *
 * Loads the claim directories of TESSERA_CLAIM_DIRS exactly as the library does (config.c, linked in),
 * then prints "policy <name>", "loglevel <n>", "limits <n>" and, for each UUID given, one line
 * "gpu <uuid> claim <i> memory <bytes> cores <c> priority <p> slot <s> view <path|->
 * ceiling <c> resident <bytes|->" (resident: "-" when the claim did not opt into oversubscription). */
#include <stdio.h>

#include "config.h"
#include "util.h"

int main(int argc, char **argv)
{
    cfg_load();
    printf("policy %s\nloglevel %d\nlimits %d\n", cfg_policy_name(), log_level(), cfg_nlimits());
    for (int i = 1; i < argc; i++) {
        struct gpu_limits l;
        int claim = cfg_lookup(argv[i], -1, &l);
        if (claim < 0) {
            printf("gpu %s none\n", argv[i]);
            continue;
        }
        char resident[24] = "-";
        if (l.spill)
            fmt_s(resident, sizeof resident, "%llu", (unsigned long long)l.resident);
        printf("gpu %s claim %d memory %llu cores %u priority %d slot %u view %s ceiling %u resident %s\n", argv[i],
               claim, (unsigned long long)l.memory, l.cores, l.priority, l.slot, l.view && l.view[0] ? l.view : "-",
               l.ceiling, resident);
    }
    return 0;
}
