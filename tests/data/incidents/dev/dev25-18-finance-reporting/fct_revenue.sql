{{ config(materialized='incremental', unique_key='order_id', partition_by={'field': 'order_date', 'data_type': 'date'}) }}

select
    o.order_id,
    o.order_date,
    o.client_app,
    o.gross_amount,
    o.currency,
    o.gross_amount * fx.eur_rate as revenue_eur
from {{ ref('stg_orders') }} o
join {{ ref('stg_fx_rates') }} fx
  on fx.currency_code = o.currency
 and fx.rate_date = o.order_date
{% if is_incremental() %}
where o.order_date = '{{ var("run_date") }}'
{% endif %}
